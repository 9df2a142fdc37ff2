package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The frontier: the lead's trade-off knob swept, beside every setting
// of the peers' tuning sweeps, each setting a point (mean hit rate, mean
// TTFT p90) in each cell of the tuning set. A peer setting is ahead of a
// lead setting when its mean hit rate is higher and its mean TTFT p90
// lower; it beats it when, paired run by run as the verdicts pair runs,
// the 95% intervals of both differences exclude zero. The lead's target
// is that no peer setting beats any setting of its knob: wherever a user
// sets the knob, no peer gets both more hits and a shorter tail.
//
// The lead's points are base (the knob at its default) and the variants
// base-knob-value; the lead's variants of other knobs are left out, and
// every other policy is a peer setting. A point no other point of its
// cell is ahead of (or level with on one figure and ahead on the other)
// is on the cell's frontier.

// frontierPoint is one setting in one cell.
type frontierPoint struct {
	row
	lead    bool    // a setting of the lead's knob
	value   float64 // the knob's value, for the lead's points
	optimal bool    // on the cell's frontier
}

// ahead is a peer setting ahead of a lead setting on both means: the
// peer paired with the lead setting run by run, as the verdicts pair a
// lead with another policy (c.hit and c.p90 are peer − lead).
type ahead struct {
	peer, lead string
	c          comparison
}

// frontier is one cell's points and the peer settings ahead of the lead's.
type frontier struct {
	s      *summary
	points []frontierPoint // the lead's by value, then the peers' in display order
	ahead  []ahead
}

// frontiers builds the frontier of every cell that has a setting of the
// lead's knob: base is the lead's default policy, def the knob's default
// value, and need the fewest paired runs a verdict takes.
func frontiers(sums []*summary, base, knob string, def float64, need int) ([]frontier, error) {
	prefix := base + "-" + knob + "-"
	var fs []frontier
	for _, s := range sums {
		f := frontier{s: s}
		var peers []frontierPoint
		for _, r := range s.rows {
			switch v, ok := strings.CutPrefix(r.policy, prefix); {
			case r.policy == base:
				f.points = append(f.points, frontierPoint{row: r, lead: true, value: def})
			case ok:
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, fmt.Errorf("policy %s: the value %q is not a number", r.policy, v)
				}
				f.points = append(f.points, frontierPoint{row: r, lead: true, value: x})
			case strings.HasPrefix(r.policy, base):
				// The lead's other knobs: not this sweep.
			default:
				peers = append(peers, frontierPoint{row: r})
			}
		}
		if len(f.points) == 0 {
			continue
		}
		slices.SortStableFunc(f.points, func(a, b frontierPoint) int { return cmpFloat(a.value, b.value) })
		f.points = append(f.points, peers...)
		for i := range f.points {
			f.points[i].optimal = !slices.ContainsFunc(f.points, func(o frontierPoint) bool { return dominates(o.row, f.points[i].row) })
		}
		for _, p := range f.points {
			if p.lead {
				continue
			}
			for _, l := range f.points {
				if l.lead && p.hit.mean > l.hit.mean && p.p90.mean < l.p90.mean {
					f.ahead = append(f.ahead, ahead{peer: p.policy, lead: l.policy, c: compareRows(p.row, l.row, need)})
				}
			}
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("no run of %s or %s*", base, prefix)
	}
	return fs, nil
}

// dominates reports whether a's means are at least b's on both figures
// and better on one: a higher hit rate, a lower TTFT p90.
func dominates(a, b row) bool {
	return a.hit.mean >= b.hit.mean && a.p90.mean <= b.p90.mean &&
		(a.hit.mean > b.hit.mean || a.p90.mean < b.p90.mean)
}

// beats reports whether the peer beats the lead setting: a higher hit
// rate and a lower TTFT p90, both intervals excluding zero.
func (a ahead) beats() bool { return a.c.hitVerdict == leads && a.c.p90Verdict == leads }

// word is the verdict as the tables print it.
func (a ahead) word() string {
	switch {
	case a.c.hitVerdict == unpaired:
		return "unpaired"
	case a.c.hitVerdict == tooFew:
		return fmt.Sprintf("too few runs (%d)", a.c.hit.n)
	case a.beats():
		return "**beats**"
	}
	return "ahead in the means only"
}

// writeFrontiers prints each cell's points and the peer settings ahead
// of the lead's, then every cell's verdicts in one table.
func writeFrontiers(w io.Writer, fs []frontier, base, knob string, need int) {
	for _, f := range fs {
		fmt.Fprintf(w, "### Frontier: %s\n\n", f.s.title())
		fmt.Fprintf(w, "| setting | %s | hit rate | TTFT p90 (s) | |\n", knob)
		fmt.Fprintln(w, "|---|---:|---:|---:|---|")
		for _, p := range f.points {
			value, note := "", ""
			if p.lead {
				value = formatValue(p.value)
			}
			if p.optimal {
				note = "frontier"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", p.policy, value, p.hit.format(3), p.p90.format(3), note)
		}
		fmt.Fprintln(w)
		if len(f.ahead) == 0 {
			fmt.Fprintf(w, "No peer setting has both a higher mean hit rate and a lower mean TTFT p90 than a setting of %s's %s.\n\n", base, knob)
			continue
		}
		fmt.Fprintf(w, "Peer settings with a higher mean hit rate and a lower mean TTFT p90 than a setting of %s's %s, paired run by run: the mean difference peer − %s [95%% paired bootstrap interval, %d resamples] and the differences above/below zero; a peer setting beats it when both intervals exclude zero and %d runs of each pair.\n\n", base, knob, base, Resamples, need)
		fmt.Fprintf(w, "| peer setting | %s setting | hit rate Δ | TTFT p90 Δ (s) | |\n", base)
		fmt.Fprintln(w, "|---|---|---:|---:|---|")
		for _, a := range f.ahead {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", a.peer, a.lead, a.c.hit.format(3), a.c.p90.format(4), a.word())
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "### Frontier verdicts of %s's %s\n\n", base, knob)
	fmt.Fprintf(w, "| cell | %s settings | beaten: peer > %s | ahead in the means only |\n", knob, base)
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, f := range fs {
		var values, beaten, means []string
		for _, p := range f.points {
			if p.lead {
				values = append(values, formatValue(p.value))
			}
		}
		for _, a := range f.ahead {
			pair := a.peer + " > " + a.lead
			if a.beats() {
				beaten = append(beaten, pair)
			} else {
				means = append(means, pair)
			}
		}
		none := func(ps []string) string {
			if len(ps) == 0 {
				return "none"
			}
			return strings.Join(ps, ", ")
		}
		fmt.Fprintf(w, "| %s, %s | %s | %s | %s |\n", f.s.workload, f.s.load, strings.Join(values, ", "), none(beaten), none(means))
	}
	fmt.Fprintln(w)
}
