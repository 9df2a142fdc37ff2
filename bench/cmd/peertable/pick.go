package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

// The tuning rule, one for every router (docs/peers.md, "Tuning"). A
// sweep runs a router's default setting, named base, beside variants
// that each change one knob, named base-knob-value (bench/scoring/tune.sh
// names them so), over the tuning set. pick chooses the knob's value:
//
//  1. Pool every cell's paired runs (the k-th run of a setting with the
//     k-th of another, as the verdicts pair them).
//  2. The best is the setting of the highest mean hit rate.
//  3. A setting is a candidate unless it is behind the best on hit rate:
//     the 95% paired bootstrap interval of its hit rate less the best's
//     lies below zero.
//  4. Among the candidates, the pick is the one of the lowest mean TTFT
//     p90 relative to the default's in the same pair (so that seconds of
//     Mooncake and tens of milliseconds of chat weigh alike); an exact
//     tie goes to the default, then to the lower value.
//
// When the pick is the lowest or the highest value swept, the knob's
// range is extended: next is one step beyond it (the step to its
// neighbour), within the knob's bounds; none when it is at a bound.
//
// A knob whose default is not a number (choice: cost or rules) is
// categorical: its values are names, ordered by name after the default,
// and its range is never extended.

// setting is one value of the knob, run as policy: a number, or the
// name of a categorical knob's value.
type setting struct {
	policy string
	value  float64
	name   string
}

// pickResult is what pick found.
type pickResult struct {
	settings []setting
	hit      []float64 // mean hit rate per setting
	vsBest   []diff    // hit rate less the best's, paired
	relP90   []float64 // mean TTFT p90 over the default's
	best     int
	picked   int
	pairs    int     // paired runs per setting, over every cell
	edge     string  // "low", "high" or ""
	next     float64 // the value beyond the edge, if hasNext
	hasNext  bool
	named    bool // a categorical knob: settings' names, no edge
}

// pickSetting applies the rule to the sweep of knob in results: base is
// the default setting's policy, def its value of the knob (a number, or
// a name for a categorical knob), and lo and hi the knob's bounds.
func pickSetting(results []*driver.Result, base, knob, def string, lo, hi float64) (*pickResult, error) {
	cells := group(results, nil)
	prefix := base + "-" + knob + "-"
	d, err := strconv.ParseFloat(def, 64)
	p := &pickResult{settings: []setting{{base, d, def}}, named: err != nil}
	seen := map[string]bool{base: true}
	for _, c := range cells {
		for _, name := range c.policies {
			v, ok := strings.CutPrefix(name, prefix)
			if !ok || seen[name] {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil && !p.named {
				return nil, fmt.Errorf("policy %s: the value %q is not a number", name, v)
			}
			seen[name] = true
			p.settings = append(p.settings, setting{name, f, v})
		}
	}
	if len(p.settings) < 2 {
		return nil, fmt.Errorf("no variant %s* beside %s", prefix, base)
	}
	// Variants in order of value (of name, for a categorical knob); the
	// default first.
	slices.SortStableFunc(p.settings[1:], func(a, b setting) int {
		if p.named {
			return strings.Compare(a.name, b.name)
		}
		return cmpFloat(a.value, b.value)
	})

	// The pooled figures of every setting, pair by pair.
	n := len(p.settings)
	hits := make([][]float64, n)
	rel := make([][]float64, n)
	for _, c := range cells {
		baseRuns := c.runs[base]
		for i, s := range p.settings {
			runs := c.runs[s.policy]
			if len(runs) != len(baseRuns) {
				return nil, fmt.Errorf("%s, %s: %d runs of %s and %d of %s: the sweep is not paired", c.workload, c.load, len(runs), s.policy, len(baseRuns), base)
			}
			for k, r := range runs {
				hits[i] = append(hits[i], r.HitRate)
				ratio := 1.0
				if d := baseRuns[k].TTFT.P90; d > 0 {
					ratio = r.TTFT.P90 / d
				}
				rel[i] = append(rel[i], ratio)
			}
		}
	}
	p.pairs = len(hits[0])
	if p.pairs == 0 {
		return nil, fmt.Errorf("no run of %s", base)
	}
	mean := func(vs []float64) float64 {
		s := 0.0
		for _, v := range vs {
			s += v
		}
		return s / float64(len(vs))
	}
	for i := range p.settings {
		p.hit = append(p.hit, mean(hits[i]))
		p.relP90 = append(p.relP90, mean(rel[i]))
		if p.hit[i] > p.hit[p.best] {
			p.best = i
		}
	}
	p.picked = -1
	for i := range p.settings {
		p.vsBest = append(p.vsBest, pairedDiff(hits[i], hits[p.best]))
		if i != p.best && judge(p.vsBest[i], true) == behind {
			continue
		}
		// The default comes first and the variants by value, so a
		// strict < leaves an exact tie to the default, then the lower.
		if p.picked < 0 || p.relP90[i] < p.relP90[p.picked] {
			p.picked = i
		}
	}

	// The edge, among every value swept; a categorical knob has none.
	if p.named {
		return p, nil
	}
	values := make([]float64, n)
	for i, s := range p.settings {
		values[i] = s.value
	}
	slices.Sort(values)
	values = slices.Compact(values)
	v := p.settings[p.picked].value
	if len(values) >= 2 {
		switch v {
		case values[0]:
			p.edge = "low"
			p.next = max(lo, v-(values[1]-v))
		case values[len(values)-1]:
			p.edge = "high"
			p.next = min(hi, v+(v-values[len(values)-2]))
		}
		p.hasNext = p.edge != "" && p.next != v
	}
	return p, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// formatValue prints a knob's value as JSON takes it: an integer as
// one, anything else in at most 6 significant digits.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// writePick prints the sweep's table, then the lines a script reads:
// "picked: V", "edge: low|high|none" and, when the range must be
// extended, "next: V".
func writePick(w io.Writer, knob string, p *pickResult) {
	fmt.Fprintf(w, "### %s\n\n", knob)
	fmt.Fprintf(w, "%d paired runs per setting over the tuning set. Rule: among the settings not behind the best hit rate (the 95%% paired bootstrap interval of the difference, %d resamples, below zero), the lowest mean TTFT p90 relative to the default's.\n\n", p.pairs, Resamples)
	if p.pairs < MinPairs {
		fmt.Fprintf(w, "Fewer than %d paired runs: the pick checks the pipeline, it tunes nothing.\n\n", MinPairs)
	}
	fmt.Fprintln(w, "| setting | value | hit rate | hit rate less the best's | TTFT p90 / default's | |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|")
	for i, s := range p.settings {
		var notes []string
		if i == 0 {
			notes = append(notes, "default")
		}
		if i == p.best {
			notes = append(notes, "best hit rate")
		} else if judge(p.vsBest[i], true) == behind {
			notes = append(notes, "behind")
		}
		if i == p.picked {
			notes = append(notes, "**picked**")
		}
		fmt.Fprintf(w, "| %s | %s | %.3f | %s | %.3f | %s |\n", s.policy, p.format(s), p.hit[i], p.vsBest[i].format(3), p.relP90[i], strings.Join(notes, ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "picked: %s\n", p.format(p.settings[p.picked]))
	edge := p.edge
	if edge == "" {
		edge = "none"
	}
	fmt.Fprintf(w, "edge: %s\n", edge)
	if p.hasNext {
		fmt.Fprintf(w, "next: %s\n", formatValue(p.next))
	}
}

// format prints a setting's value: its name for a categorical knob.
func (p *pickResult) format(s setting) string {
	if p.named {
		return s.name
	}
	return formatValue(s.value)
}

// parseRange parses -range "lo,hi".
func parseRange(s string) (lo, hi float64, err error) {
	a, b, ok := strings.Cut(s, ",")
	if ok {
		if lo, err = strconv.ParseFloat(a, 64); err == nil {
			hi, err = strconv.ParseFloat(b, 64)
		}
	}
	if !ok || err != nil || lo > hi {
		return 0, 0, fmt.Errorf("-range %q: want lo,hi with lo <= hi", s)
	}
	return lo, hi, nil
}
