package driver

import (
	"math"
	"slices"
	"time"
)

// admissions checks prefix_cache's load bound the way the policy applies
// it, from the client's records: when a request was sent, the upstream
// that took it must have had Load+1 <= ceil(factor x (sum of loads + 1) /
// n) + allowance, where Load is the requests in flight at that upstream
// (sent, not yet ended) and n the number of upstreams. It returns the
// number of requests admitted over the bound.
//
// The client's send and end times stand in for Caddy's selection and
// release, a few hundred microseconds apart, so an admission right at the
// bound may be misjudged by one request.
func admissions(recs []Record, upstreams []string, factor float64, allowance int) int {
	type event struct {
		at    time.Duration
		start bool
		up    int
	}
	var evs []event
	for i := range recs {
		r := &recs[i]
		up := slices.Index(upstreams, r.Upstream)
		if up < 0 {
			continue
		}
		evs = append(evs, event{r.Sent, true, up}, event{r.Sent + r.E2E, false, up})
	}
	slices.SortFunc(evs, func(a, b event) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		case !a.start && b.start:
			return -1 // ends first at equal times
		case a.start && !b.start:
			return 1
		}
		return 0
	})
	load := make([]int, len(upstreams))
	sum, over := 0, 0
	for _, e := range evs {
		if !e.start {
			load[e.up]--
			sum--
			continue
		}
		bound := int(math.Ceil(factor*float64(sum+1)/float64(len(upstreams)))) + allowance
		if load[e.up]+1 > bound {
			over++
		}
		load[e.up]++
		sum++
	}
	return over
}
