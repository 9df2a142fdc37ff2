package selection

import "math"

// chooseCost is Choose with Policy.Cost, for a known bound and byte bound
// and n = len(cands) > 0: one pass that keeps the deepest holder overall
// and under the bound, the rendezvous-hash winner overall and under the
// bound, the least-loaded candidate, and the candidate under the bound
// with the least cost. The cost and its margin are in the package
// documentation.
func (p Policy) chooseCost(cands []Candidate, placement uint64, size int64, bound int, byteBound int64) Choice {
	minDepth := max(p.MinDepth, 1)
	size = max(size, 0)
	ref := p.NsPerByte
	if !(ref > 0) || math.IsInf(ref, 1) { // an invalid policy's NaN, negative or infinite speed
		ref = 0
	}
	weight := p.CacheWeight
	if !(weight > 0) || math.IsInf(weight, 1) {
		weight = 0
	}
	chunk := int64(max(p.ChunkSize, 1))
	chunks := size/chunk + min(size%chunk, 1) // ceil(size/chunk): the depth that matches it all

	var (
		holder, holderUnder, hrw, hrwUnder, best, least = -1, -1, -1, -1, -1, -1

		holderScore, holderUnderScore, hrwScore, hrwUnderScore, bestScore, leastScore uint64

		holderDepth, holderUnderDepth, bestDepth int

		holderUnderCost, hrwUnderCost, bestCost, bestTTFT float64
	)
	for i := range cands {
		c := &cands[i]
		s := score(placement, c.Key)
		if hrw < 0 || s > hrwScore {
			hrw, hrwScore = i, s
		}
		if least < 0 || c.Load < cands[least].Load || (c.Load == cands[least].Load && s > leastScore) {
			least, leastScore = i, s
		}
		// A match shallower than MinDepth counts for nothing: following
		// chat-template boilerplate would herd unrelated conversations
		// onto whichever upstream saw it first (DefaultMinDepth).
		d := c.Depth
		if d < minDepth {
			d = 0
		}
		if d > 0 && (holder < 0 || deeper(d, s, holderDepth, holderScore)) {
			holder, holderScore, holderDepth = i, s, d
		}
		if c.Load >= bound || (byteBound != 0 && c.Bytes > byteBound) { // over the bound
			continue
		}
		cost, ttft := candidateCost(c, d, size, chunk, chunks, ref, weight)
		if d > 0 && (holderUnder < 0 || deeper(d, s, holderUnderDepth, holderUnderScore)) {
			holderUnder, holderUnderScore, holderUnderDepth, holderUnderCost = i, s, d, cost
		}
		if hrwUnder < 0 || s > hrwUnderScore {
			hrwUnder, hrwUnderScore, hrwUnderCost = i, s, cost
		}
		if best < 0 || cost < bestCost || (cost == bestCost && deeper(d, s, bestDepth, bestScore)) {
			best, bestScore, bestDepth, bestCost, bestTTFT = i, s, d, cost, ttft
		}
	}

	ch := Choice{Bound: bound, ByteBound: byteBound, Preferred: hrw}
	if holder >= 0 {
		ch.Preferred = holder
	}
	// home is where the request goes unless the cost says otherwise
	// (by more than the margin): the deepest holder under the bound,
	// else the rendezvous-hash winner under the bound. It depends on
	// the index and the bound alone, which edges share, not on the
	// queues, which each edge sees its own share of.
	home, homeCost := hrwUnder, hrwUnderCost
	if holderUnder >= 0 {
		home, homeCost = holderUnder, holderUnderCost
	}
	switch {
	case home < 0:
		ch.Index, ch.Reason = least, ReasonLeastLoaded
	case best != home && homeCost-bestCost > p.margin(size, int64(minDepth)*chunk, ref, bestTTFT):
		ch.Index = best
		switch {
		case holder < 0:
			ch.Reason = ReasonPrefill
		case bestDepth > 0:
			ch.Reason = ReasonSpill
		default:
			ch.Reason = ReasonSpillCold
		}
	default:
		ch.Index = home
		switch {
		case home == holder:
			ch.Reason = ReasonMatch
		case holder >= 0 && home == holderUnder:
			ch.Reason = ReasonSpill
		case holder >= 0:
			ch.Reason = ReasonSpillCold
		case home == hrw:
			ch.Reason = ReasonCold
		default:
			ch.Reason = ReasonColdSpill
		}
	}
	ch.Spilled = ch.Index != ch.Preferred
	return ch
}

// margin is what a move from home to the least cost must save: nothing,
// so that the least cost wins, unless p.Sticky. Sticky, more than the
// request's own prefill (counted as at least floor, the shortest match
// the policy routes on) and all it is predicted to wait and prefill where
// it goes (ttft): a difference that no instance's private share of the
// queues makes up.
func (p Policy) margin(size, floor int64, ref, ttft float64) float64 {
	if !p.Sticky {
		return 0
	}
	return float64(max(size, floor))*ref + ttft
}

// candidateCost is the cost of sending a request of the given size, in
// chunks of the given size (chunks of them in all), to c, which holds d
// useful chunks of it (0 below MinDepth), up to a term that is the same
// for every candidate, and its predicted time to first token there:
//
//	matched = min(d*chunk, size)
//	ttft    = (Backlog + size - matched) * ns
//	cost    = ttft - weight * ref * matched
//
// where ns is c.NsPerByte, or ref when unset or invalid. A NaN (from an
// invalid policy's product of infinities) counts as +Inf, so it never
// wins.
func candidateCost(c *Candidate, d int, size, chunk, chunks int64, ref, weight float64) (cost, ttft float64) {
	matched := size
	if int64(d) < chunks {
		matched = int64(d) * chunk
	}
	ns := c.NsPerByte
	if !(ns > 0) || math.IsInf(ns, 1) {
		ns = ref
	}
	ttft = (float64(max(c.Backlog, 0)) + float64(size-matched)) * ns
	cost = ttft - weight*ref*float64(matched)
	if ttft != ttft {
		ttft = math.Inf(1)
	}
	if cost != cost {
		return math.Inf(1), ttft
	}
	return cost, ttft
}
