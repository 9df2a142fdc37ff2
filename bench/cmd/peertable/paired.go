package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// The paired verdict. Runs of one cell are paired in the order they
// appear, the k-th run of the lead with the k-th of the other policy:
// one prefixbench file holds every policy of a seed (or a Mooncake run)
// on the same arrivals, and the files of two directories listed alike
// (one glob each) hold the same seeds in the same order. The paired
// differences d_k = lead_k − other_k are resampled with replacement
// Resamples times (a fixed seed, so a table rebuilds byte-identical);
// the 2.5th and 97.5th percentiles of the resampled means are the 95%
// interval of the mean difference. The lead "leads" when the interval
// lies entirely on its better side of zero, is "behind" when it lies
// entirely on the worse side, and ties otherwise (zero inside, or on
// the interval's edge). A cell with fewer than MinPairs pairs, or with
// different numbers of runs of the two policies, gets no verdict.

// Resamples is the paired bootstrap's number of resamples.
const Resamples = 10000

// bootstrapSeed seeds the resampling RNG of every interval.
const bootstrapSeed = 35

// MinPairs is the fewest paired runs of a cell that give a verdict.
const MinPairs = 5

// diff is the paired difference of a figure over a cell's runs: its
// mean, the bootstrap interval of the mean, and how many differences
// were above and below zero (a sign test's counts).
type diff struct {
	n        int
	mean     float64
	lo, hi   float64
	pos, neg int
}

// pairedDiff returns the paired difference lead[k] − other[k]; lead and
// other have the same length.
func pairedDiff(lead, other []float64) diff {
	d := make([]float64, len(lead))
	for k := range lead {
		d[k] = lead[k] - other[k]
	}
	return bootstrap(d)
}

// bootstrap returns the mean of d and its paired bootstrap 95% interval
// (percentiles of Resamples resampled means).
func bootstrap(d []float64) diff {
	r := diff{n: len(d)}
	if len(d) == 0 {
		return r
	}
	for _, v := range d {
		r.mean += v
		switch {
		case v > 0:
			r.pos++
		case v < 0:
			r.neg++
		}
	}
	r.mean /= float64(len(d))
	rng := rand.New(rand.NewPCG(bootstrapSeed, uint64(len(d))))
	means := make([]float64, Resamples)
	for i := range means {
		s := 0.0
		for range d {
			s += d[rng.IntN(len(d))]
		}
		means[i] = s / float64(len(d))
	}
	slices.Sort(means)
	r.lo = means[Resamples*25/1000]
	r.hi = means[Resamples*975/1000-1]
	return r
}

// verdict is a paired comparison's outcome.
type verdict int

const (
	tooFew verdict = iota
	unpaired
	tie
	leads
	behind
)

func (v verdict) String() string {
	return [...]string{"too few runs", "unpaired", "tie", "leads", "behind"}[v]
}

// judge says how the lead stands on a figure from its paired difference:
// leads or behind only when the interval excludes zero.
func judge(d diff, higher bool) verdict {
	better, worse := d.lo > 0, d.hi < 0
	if !higher {
		better, worse = worse, better
	}
	switch {
	case better:
		return leads
	case worse:
		return behind
	}
	return tie
}

// comparison is the lead against one other policy in one cell.
type comparison struct {
	policy                 string
	leadRuns, otherRuns    int
	need                   int
	hit, p50, p90, p99     diff
	hitVerdict, p90Verdict verdict
}

// compareRows pairs lead's and other's runs and judges hit rate (higher
// is better) and TTFT p90 (lower is better).
func compareRows(lead, other row, need int) comparison {
	c := comparison{policy: other.policy, leadRuns: lead.runs, otherRuns: other.runs, need: need}
	switch {
	case lead.runs != other.runs:
		c.hitVerdict, c.p90Verdict = unpaired, unpaired
		return c
	case lead.runs < need:
		c.hitVerdict, c.p90Verdict = tooFew, tooFew
	}
	c.hit = pairedDiff(lead.hits, other.hits)
	c.p50 = pairedDiff(lead.p50s, other.p50s)
	c.p90 = pairedDiff(lead.p90s, other.p90s)
	c.p99 = pairedDiff(lead.p99s, other.p99s)
	if lead.runs >= need {
		c.hitVerdict, c.p90Verdict = judge(c.hit, true), judge(c.p90, false)
	}
	return c
}

// word is the verdict as the tables print it.
func (c comparison) word(v verdict) string {
	switch v {
	case tooFew:
		return fmt.Sprintf("too few runs (%d, %d needed)", c.leadRuns, c.need)
	case unpaired:
		return fmt.Sprintf("unpaired (%d and %d runs)", c.leadRuns, c.otherRuns)
	}
	return v.String()
}

// format prints the difference with its interval and signs, e.g.
// "+0.012 [+0.004, +0.020] 5+/0−".
func (d diff) format(digits int) string {
	if d.n == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.*f [%+.*f, %+.*f] %d+/%d−", digits, d.mean, digits, d.lo, digits, d.hi, d.pos, d.neg)
}
