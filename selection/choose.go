package selection

import "math/bits"

// Candidate is one available upstream as Choose sees it.
type Candidate struct {
	// Key is the stable identity of the upstream for rendezvous hashing,
	// for example a hash of its Dial string. Independent instances agree on
	// placements only if they derive Key the same way.
	Key uint64
	// Depth is how many leading chunks of this request the upstream is
	// believed to hold.
	Depth int
	// Load is the number of requests in flight at the upstream, not
	// counting this one. Never negative.
	Load int
	// Bytes is the prompt size of the requests in flight at the upstream,
	// not counting this one, in the unit of Choose's size (the caller's
	// choice; caddymodule counts bytes of routing text). Never negative.
	// Only the byte bound reads it (Policy.ByteAllowance > 0).
	Bytes int64
	// Backlog is the prefill the upstream is believed to have queued:
	// the uncached prompt of the requests sent to it that it has not
	// prefilled yet, in the caller's unit. Policy.ColdBacklog and
	// Policy.Cost read it.
	Backlog int64
	// NsPerByte is how long the upstream takes to prefill one unit of
	// size (nanoseconds per byte of routing text in caddymodule): its
	// measured prefill speed. 0, a negative, NaN or infinite value
	// means Policy.NsPerByte. Only Policy.Cost reads it.
	NsPerByte float64
}

// Choice is the result of Choose.
type Choice struct {
	// Index is the chosen candidate, or -1 if there were none.
	Index int
	// Preferred is the candidate the policy would pick with no bound: the
	// deepest holder or, for a cold request, the rendezvous-hash winner.
	// -1 if there were no candidates.
	Preferred int
	// Reason says why Index was chosen.
	Reason Reason
	// Spilled is true when the bound, the cold bound, the backlog or
	// the cost moved the choice away from Preferred, that is when
	// Index != Preferred.
	Spilled bool
	// Bound is the in-flight bound the choice was made with, as
	// Policy.Bound returns it.
	Bound int
	// ByteBound is the byte bound the choice was made with, as
	// Policy.ByteBound returns it; 0 when the byte bound is off.
	ByteBound int64
	// ColdBound is the cold bound a cold request was placed with, as
	// Policy.ColdBound returns it; 0 for a warm request or when the cold
	// bound is off.
	ColdBound int
}

// Choose picks one of cands for a request whose placement key is placement
// (a hash of the request's placement text) and whose prompt has the given
// size (in the unit of Candidate.Bytes). It never allocates, never
// modifies cands, and returns the same Choice for the same input whatever
// the order of cands (up to the indexes, and save for equal keys). The
// rules, and the cost that replaces them with Policy.Cost, are in the
// package documentation.
func (p Policy) Choose(cands []Candidate, placement uint64, size int64) Choice {
	if len(cands) == 0 {
		return Choice{Index: -1, Preferred: -1, Reason: ReasonNone}
	}
	sum := loadSum(cands)
	bound := p.bound(sum, len(cands))
	byteBound := p.ByteBound(cands, size)
	if p.Cost {
		return p.chooseCost(cands, placement, size, bound, byteBound)
	}
	minDepth := max(p.MinDepth, 1)
	coldBound, coldOrBound := 0, bound
	if p.ColdLoadFactor != 0 {
		coldBound = p.coldBound(sum, len(cands))
		if coldBound > 0 {
			coldOrBound = coldBound
		}
	}

	// One pass keeps the best candidate of each kind, -1 if none.
	var (
		holder, holderUnder, hrw, hrwUnder, hrwCold, least = -1, -1, -1, -1, -1, -1

		holderScore, holderUnderScore, hrwScore, hrwUnderScore, hrwColdScore, leastScore uint64

		// With ColdBacklog: the candidate under the bound and the cold
		// bound with the least backlog, the highest-ranked on a tie.
		quiet      = -1
		quietScore uint64
	)
	for i := range cands {
		c := &cands[i]
		s := score(placement, c.Key)
		under := c.Load < bound && // Load+1 <= bound, without overflow
			(byteBound == 0 || c.Bytes <= byteBound)
		if hrw < 0 || s > hrwScore {
			hrw, hrwScore = i, s
		}
		if under && (hrwUnder < 0 || s > hrwUnderScore) {
			hrwUnder, hrwUnderScore = i, s
		}
		if under && c.Load < coldOrBound && (hrwCold < 0 || s > hrwColdScore) { // Load+1 <= coldOrBound
			hrwCold, hrwColdScore = i, s
		}
		if p.ColdBacklog && under && c.Load < coldOrBound && (quiet < 0 || c.Backlog < cands[quiet].Backlog ||
			(c.Backlog == cands[quiet].Backlog && s > quietScore)) {
			quiet, quietScore = i, s
		}
		if least < 0 || c.Load < cands[least].Load || (c.Load == cands[least].Load && s > leastScore) {
			least, leastScore = i, s
		}
		if c.Depth < minDepth {
			continue
		}
		if holder < 0 || deeper(c.Depth, s, cands[holder].Depth, holderScore) {
			holder, holderScore = i, s
		}
		if under && (holderUnder < 0 || deeper(c.Depth, s, cands[holderUnder].Depth, holderUnderScore)) {
			holderUnder, holderUnderScore = i, s
		}
	}

	ch := Choice{Bound: bound, ByteBound: byteBound}
	if holder >= 0 {
		ch.Preferred = holder
		switch {
		case holderUnder == holder:
			ch.Index, ch.Reason = holder, ReasonMatch
		case holderUnder >= 0:
			ch.Index, ch.Reason = holderUnder, ReasonSpill
		case hrwUnder >= 0:
			ch.Index, ch.Reason = hrwUnder, ReasonSpillCold
		default:
			ch.Index, ch.Reason = least, ReasonLeastLoaded
		}
	} else {
		ch.Preferred = hrw
		ch.ColdBound = coldBound
		switch {
		case hrwCold == hrw:
			ch.Index, ch.Reason = hrw, ReasonCold
		case hrwCold >= 0:
			ch.Index, ch.Reason = hrwCold, ReasonColdSpill
		case hrwUnder >= 0:
			ch.Index, ch.Reason = hrwUnder, ReasonColdSpill
		default:
			ch.Index, ch.Reason = least, ReasonLeastLoaded
		}
		if quiet >= 0 && cands[quiet].Backlog < cands[ch.Index].Backlog {
			ch.Index, ch.Reason = quiet, ReasonPrefill
		}
	}
	ch.Spilled = ch.Index != ch.Preferred
	return ch
}

// deeper reports whether a holder at depth d with score s ranks above one
// at depth bd with score bs: deeper first, then higher score.
func deeper(d int, s uint64, bd int, bs uint64) bool {
	return d > bd || (d == bd && s > bs)
}

// score is the rendezvous-hash (HRW) weight of the upstream key for the
// placement key: the splitmix64 finalizer of placement ^ rotl(key, 32).
// The rotation keeps small keys and small placements (as in tests) from
// cancelling out. For a fixed placement it is a bijection of key. Changing
// it moves cold placements and breaks agreement between instances running
// different versions: TestScoreGolden pins it.
func score(placement, key uint64) uint64 {
	z := placement ^ bits.RotateLeft64(key, 32)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
