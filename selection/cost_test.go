package selection

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refCost is the cost as the package documentation writes it, term by
// term, with the prefix lost counted from the deepest match among all
// candidates: ttft + CacheWeight * lost. It returns each candidate's
// cost and its predicted time to first token.
func refCost(p Policy, cands []Candidate, size int64) (costs, ttfts []float64) {
	size = max(size, 0)
	ref := p.NsPerByte
	if !(ref > 0) || math.IsInf(ref, 1) {
		ref = 0
	}
	w := p.CacheWeight
	if !(w > 0) || math.IsInf(w, 1) {
		w = 0
	}
	matched := make([]int64, len(cands))
	var best int64
	for i, c := range cands {
		if c.Depth >= max(p.MinDepth, 1) {
			matched[i] = int64(min(float64(c.Depth)*float64(max(p.ChunkSize, 1)), float64(size)))
		}
		best = max(best, matched[i])
	}
	costs, ttfts = make([]float64, len(cands)), make([]float64, len(cands))
	for i, c := range cands {
		ns := c.NsPerByte
		if !(ns > 0) || math.IsInf(ns, 1) {
			ns = ref
		}
		wait := float64(max(c.Backlog, 0)) * ns
		own := float64(size-matched[i]) * ns
		lost := float64(best-matched[i]) * ref
		ttfts[i] = wait + own
		costs[i] = ttfts[i] + w*lost
		if math.IsNaN(ttfts[i]) {
			ttfts[i] = math.Inf(1)
		}
		if math.IsNaN(costs[i]) {
			costs[i] = math.Inf(1)
		}
	}
	return costs, ttfts
}

// refChooseCost is Choose with Policy.Cost written the slow, obvious way:
// home is the deepest holder under the bound, else the highest-ranked
// candidate under it; sort the candidates under the bound by cost, then
// depth, then rendezvous rank; leave home for the first when that saves
// anything or, with Sticky, more than the request's own prefill plus its
// predicted time to first token there, the own prefill counted as at
// least MinDepth chunks'.
func refChooseCost(p Policy, cands []Candidate, placement uint64, size int64) Choice {
	if len(cands) == 0 {
		return Choice{Index: -1, Preferred: -1, Reason: ReasonNone}
	}
	bound, byteBound := p.Bound(cands), p.ByteBound(cands, size)
	costs, ttfts := refCost(p, cands, size)
	depth := func(i int) int {
		if cands[i].Depth < max(p.MinDepth, 1) {
			return 0
		}
		return cands[i].Depth
	}
	order := make([]int, len(cands)) // by depth, then HRW
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(score(placement, cands[b].Key), score(placement, cands[a].Key))
	})
	hrw := order[0]
	byLoad := slices.Clone(order)
	slices.SortStableFunc(byLoad, func(a, b int) int { return cmp.Compare(cands[a].Load, cands[b].Load) })
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(depth(b), depth(a)) })
	preferred := order[0]
	if depth(preferred) == 0 {
		preferred = hrw
	}
	var under []int
	for _, i := range order {
		if cands[i].Load+1 <= bound && (byteBound == 0 || cands[i].Bytes <= byteBound) {
			under = append(under, i)
		}
	}
	pick := func(i int, r Reason) Choice {
		return Choice{Index: i, Preferred: preferred, Reason: r, Spilled: i != preferred, Bound: bound, ByteBound: byteBound}
	}
	if len(under) == 0 {
		return pick(byLoad[0], ReasonLeastLoaded)
	}
	home := under[0] // the deepest holder under the bound, else the highest-ranked
	if depth(home) == 0 {
		for _, i := range under {
			if score(placement, cands[i].Key) > score(placement, cands[home].Key) {
				home = i
			}
		}
	}
	byCost := slices.Clone(under)
	slices.SortStableFunc(byCost, func(a, b int) int { return cmp.Compare(costs[a], costs[b]) })
	ref := p.NsPerByte
	if !(ref > 0) || math.IsInf(ref, 1) {
		ref = 0
	}
	warm := depth(preferred) > 0
	margin := 0.0
	if p.Sticky {
		margin = float64(max(size, int64(max(p.MinDepth, 1))*int64(max(p.ChunkSize, 1))))*ref + ttfts[byCost[0]]
	}
	if least := byCost[0]; least != home && costs[home]-costs[least] > margin {
		switch {
		case !warm:
			return pick(least, ReasonPrefill)
		case depth(least) > 0:
			return pick(least, ReasonSpill)
		default:
			return pick(least, ReasonSpillCold)
		}
	}
	switch {
	case home == preferred && warm:
		return pick(home, ReasonMatch)
	case warm && depth(home) > 0:
		return pick(home, ReasonSpill)
	case warm:
		return pick(home, ReasonSpillCold)
	case home == hrw:
		return pick(home, ReasonCold)
	default:
		return pick(home, ReasonColdSpill)
	}
}

// checkCost checks got = p.Choose(cands, placement, size), p.Cost set,
// against refChooseCost and the invariants of the cost.
func checkCost(t *testing.T, p Policy, cands []Candidate, placement uint64, size int64, got Choice) {
	t.Helper()
	call := fmt.Sprintf("%+v.Choose(%v, %#x, %d)", p, cands, placement, size)
	if want := refChooseCost(p, cands, placement, size); got != want {
		t.Fatalf("%s = %+v, want %+v (reference)", call, got, want)
	}
	if len(cands) == 0 {
		return
	}
	if got.Spilled != (got.Index != got.Preferred) || got.ColdBound != 0 {
		t.Fatalf("%s = %+v, want Spilled == (Index != Preferred) and no cold bound", call, got)
	}
	isUnder := func(c Candidate) bool {
		return c.Load+1 <= got.Bound && (got.ByteBound == 0 || c.Bytes <= got.ByteBound)
	}
	anyUnder := slices.ContainsFunc(cands, isUnder)
	if anyUnder && !isUnder(cands[got.Index]) {
		t.Fatalf("%s = %+v: over the bound although a candidate is under it", call, got)
	}
	if anyUnder == (got.Reason == ReasonLeastLoaded) {
		t.Fatalf("%s = %+v: reason %v with a candidate under the bound: %v", call, got, got.Reason, anyUnder)
	}
	// The cost never moves a request to a candidate it predicts worse
	// than its preferred one, when that one is under the bound.
	costs, _ := refCost(p, cands, size)
	if anyUnder && isUnder(cands[got.Preferred]) && costs[got.Index] > costs[got.Preferred] {
		t.Fatalf("%s = %+v: cost %v, more than the preferred's %v", call, got, costs[got.Index], costs[got.Preferred])
	}
	// On an idle fleet (no queues, one speed) the cost chooses as the
	// rules do without the cold rules: a warm request stays home, a
	// cold one goes to its rendezvous-hash winner.
	idle := !slices.ContainsFunc(cands, func(c Candidate) bool {
		return c.Backlog != 0 || c.NsPerByte != cands[0].NsPerByte
	})
	if idle {
		rules := p
		rules.Cost, rules.ColdLoadFactor, rules.ColdBacklog = false, 0, false
		if want := rules.Choose(cands, placement, size); got != want {
			t.Fatalf("%s = %+v on an idle fleet, want the rules' %+v", call, got, want)
		}
	}
}

// costPolicy is the policy the cost tests start from: one byte per unit,
// 1 ns per byte, so every figure is exact in float64.
var costPolicy = Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, Cost: true, ChunkSize: 256, NsPerByte: 1, CacheWeight: 1}

// stickyPolicy is costPolicy while its placements do not reach the tier.
var stickyPolicy = func() Policy { p := costPolicy; p.Sticky = true; return p }()

func withWeight(p Policy, w float64) Policy {
	p.CacheWeight = w
	return p
}

// TestChooseCost pins the cost on hand-worked cases. The request is 4096
// bytes; the holder at depth 8 holds 2048 of them. Against an idle
// candidate with no prefix, staying costs q + 2048 and moving 4096 +
// w x 2048: the least cost keeps it home while q <= 2048 + w x 2048.
// Sticky, the move must save more than the request's own prefill (4096)
// plus its time to first token there (4096): the holder keeps it while
// its queue q <= 8192 + (1+w) x 2048.
// bound = ceil(1.25 x 1 / 3) + 16 = 17 with no load.
func TestChooseCost(t *testing.T) {
	free := costPolicy
	p := stickyPolicy
	strict := p
	strict.Allowance = 0
	tests := []struct {
		name  string
		p     Policy
		cands []Candidate
		want  Choice
	}{
		{"warm, idle: home", p,
			[]Candidate{{rk[1], 8, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"warm, queue equal to what the move loses: home", p,
			[]Candidate{{rk[1], 8, 0, 0, 4096, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"warm, queue at the margin: home", p,
			[]Candidate{{rk[1], 8, 0, 0, 12288, 0}, {rk[2], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"warm, queue beyond the margin: the HRW winner of the rest", p,
			[]Candidate{{rk[1], 8, 0, 0, 12289, 0}, {rk[2], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 2, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 17}},
		{"warm, a queue elsewhere raises the margin", p,
			[]Candidate{{rk[1], 8, 0, 0, 12289, 0}, {rk[2], 0, 0, 0, 1, 0}, {rk[0], 0, 0, 0, 1, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"weight 0: pure ttft moves it sooner", withWeight(p, 0),
			[]Candidate{{rk[1], 8, 0, 0, 10241, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 17}},
		{"weight 0: not at the margin", withWeight(p, 0),
			[]Candidate{{rk[1], 8, 0, 0, 10240, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"large weight keeps it home", withWeight(p, 10),
			[]Candidate{{rk[1], 8, 0, 0, 30720, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"large weight, larger queue", withWeight(p, 10),
			[]Candidate{{rk[1], 8, 0, 0, 30721, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 17}},
		// depth 4 holds 1024: staying costs q+2048, the second holder
		// 3072+1024 (1024 lost, ttft 3072), a cold one 4096+2048: the
		// move to the second holder must save more than 4096+3072.
		{"not yet to a shallower holder", p,
			[]Candidate{{rk[1], 8, 0, 0, 9216, 0}, {rk[2], 4, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"to a shallower holder", p,
			[]Candidate{{rk[1], 8, 0, 0, 9217, 0}, {rk[2], 4, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonSpill, Spilled: true, Bound: 17}},
		// At 3 ns a byte, staying costs (q+2048) x 3 against 6144.
		{"a slow holder counts its speed", p,
			[]Candidate{{rk[1], 8, 0, 0, 2731, 3}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 17}},
		{"a slow holder, a shorter queue", p,
			[]Candidate{{rk[1], 8, 0, 0, 2730, 3}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"a fast holder keeps a longer queue", p,
			[]Candidate{{rk[1], 8, 0, 0, 48000, 0.25}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"depth below MinDepth counts for nothing", p,
			[]Candidate{{rk[1], 3, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 3, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 17}},
		{"equal costs: the deeper", p,
			[]Candidate{{rk[1], 16, 0, 0, 0, 0}, {rk[0], 20, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonMatch, Bound: 17}},
		{"equal depths: the HRW winner, whatever the queues", p,
			[]Candidate{{rk[1], 8, 0, 0, 0, 0}, {rk[0], 8, 0, 0, 3000, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonMatch, Bound: 17}},

		// Cold: the HRW winner unless moving saves more than the
		// request's own prefill (4096) plus its wait and prefill at
		// the least cost (0 + 4096).
		{"cold, idle: the HRW winner", p,
			[]Candidate{{rk[1], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 17}},
		{"cold, a difference of the margin: the HRW winner", p,
			[]Candidate{{rk[1], 0, 0, 0, 100, 0}, {rk[0], 0, 0, 0, 8192, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 17}},
		{"cold, a clear difference: the least cost", p,
			[]Candidate{{rk[1], 0, 0, 0, 100, 0}, {rk[0], 0, 0, 0, 8193, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 2, Preferred: 1, Reason: ReasonPrefill, Spilled: true, Bound: 17}},

		// The bound stays a hard cap: bound = ceil(1.25 x 21 / 3) = 9.
		{"the bound caps the cheapest", strict,
			[]Candidate{{rk[1], 8, 9, 0, 0, 0}, {rk[0], 0, 6, 0, 90000, 0}, {rk[2], 0, 5, 0, 90000, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 9}},
		{"the bound: the next-deepest holder", strict,
			[]Candidate{{rk[1], 8, 9, 0, 0, 0}, {rk[2], 6, 6, 0, 2000, 0}, {rk[0], 0, 5, 0, 0, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonSpill, Spilled: true, Bound: 9}},
		{"cold: the bound caps the HRW winner", strict,
			[]Candidate{{rk[1], 0, 5, 0, 0, 0}, {rk[0], 0, 9, 0, 0, 0}, {rk[2], 0, 6, 0, 0, 0}},
			Choice{Index: 0, Preferred: 1, Reason: ReasonColdSpill, Spilled: true, Bound: 9}},
		{"the cold rules are not read", func() Policy { q := p; q.ColdLoadFactor, q.ColdBacklog = 1, true; return q }(),
			[]Candidate{{rk[1], 0, 0, 0, 0, 0}, {rk[0], 0, 2, 0, 100, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 18}},
		{"no speed: depth, then HRW", func() Policy { q := p; q.NsPerByte = 0; return q }(),
			[]Candidate{{rk[1], 8, 0, 0, 90000, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},

		// Not sticky: the least cost, home on a tie.
		{"free, warm, idle: home", free,
			[]Candidate{{rk[1], 8, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"free, warm, a queue of what the move loses: home", free,
			[]Candidate{{rk[1], 8, 0, 0, 4096, 0}, {rk[2], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
		{"free, warm, a byte more: the least cost", free,
			[]Candidate{{rk[1], 8, 0, 0, 4097, 0}, {rk[2], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 2, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 17}},
		{"free, equal depths: the shorter queue", free,
			[]Candidate{{rk[1], 8, 0, 0, 0, 0}, {rk[0], 8, 0, 0, 3000, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 1, Reason: ReasonSpill, Spilled: true, Bound: 17}},
		{"free, cold, equal queues: the HRW winner", free,
			[]Candidate{{rk[1], 0, 0, 0, 100, 0}, {rk[0], 0, 0, 0, 100, 0}, {rk[2], 0, 0, 0, 100, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 17}},
		{"free, cold: the shortest queue", free,
			[]Candidate{{rk[1], 0, 0, 0, 100, 0}, {rk[0], 0, 0, 0, 101, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 2, Preferred: 1, Reason: ReasonPrefill, Spilled: true, Bound: 17}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Choose(tt.cands, tp, 4096)
			if got != tt.want {
				t.Errorf("%+v.Choose(%s, %#x, 4096) = %+v, want %+v", tt.p, show(tt.cands), tp, got, tt.want)
			}
			checkCost(t, tt.p, tt.cands, tp, 4096, got)
		})
	}
}

// TestCostAgreement feeds two edges the same fleet of 4 engines, each
// edge seeing only its own share of the queues and of the requests in
// flight, as two edges do while the sync channel is down, and counts
// the placements on which they disagree: few with the sticky cost, many
// with the least cost alone, as with the rules. The noise
// is of the size the faults run (bench/results/faults) makes: 32
// clients over 2 edges and 4 engines, so 0 to 8 requests in flight at
// each engine, and 0 to 2 of them queued for prefill (the engines
// prefill a request's uncached text far faster than requests arrive),
// each sent by either edge, each with 100 to 1000 bytes uncached (a
// short conversation's whole text, or a shared-prompt conversation's
// new turn). The requests are of that
// run's two kinds: short cold ones (200 to 1000 bytes), and ones of
// 3200 to 4000 bytes whose conversation's earlier turns its home holds
// to the last chunk but one, and whose 2816-byte shared system prompt
// two other engines hold. The rules' cold placements, whose cold bound
// and ColdBacklog move a request on any difference, disagree often. A
// clear difference (40 KiB more queued at home, ten prefills of the
// longest request) still moves the request, on both edges alike.
func TestCostAgreement(t *testing.T) {
	const n, trials = 4, 4000
	rules := Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: 1, ColdBacklog: true}
	rng := rand.New(rand.NewPCG(3, 4))
	var views [2][]Candidate
	for e := range views {
		views[e] = make([]Candidate, n)
	}
	disagree := map[string]int{}
	name := func(p Policy) string {
		switch {
		case p.Sticky:
			return "sticky"
		case p.Cost:
			return "cost"
		}
		return "rules"
	}
	for trial := range trials {
		placement := rng.Uint64()
		for i := range n {
			for e := range views {
				views[e][i] = Candidate{Key: dialKey(i)}
			}
			for range rng.IntN(9) { // in flight
				views[rng.IntN(2)][i].Load++
			}
			for range rng.IntN(3) { // queued
				views[rng.IntN(2)][i].Backlog += 100 + rng.Int64N(901)
			}
		}
		kind, size := "cold", 200+rng.Int64N(801)
		if trial%2 == 1 {
			kind, size = "warm", 3200+rng.Int64N(801)
			home := rng.IntN(n)
			for e := range views {
				for i := range n {
					views[e][i].Depth = 11 // the shared system prompt
				}
				views[e][home].Depth = int(size/256) - 1
				views[e][(home+1)%n].Depth = 0
			}
		}
		for _, p := range []Policy{rules, costPolicy, stickyPolicy} {
			a, b := p.Choose(views[0], placement, size), p.Choose(views[1], placement, size)
			if a.Index != b.Index {
				if p.Sticky {
					t.Logf("%s request of %d bytes: %+v.Choose(%s) = %+v on one edge, Choose(%s) = %+v on the other",
						kind, size, p, show(views[0]), a, show(views[1]), b)
				}
				disagree[kind+", "+name(p)]++
			}
		}
		// A clear difference moves the request on both edges alike.
		home := stickyPolicy.Choose(views[0], placement, size).Preferred
		for e := range views {
			views[e][home].Backlog += 40 << 10
		}
		a, b := stickyPolicy.Choose(views[0], placement, size), stickyPolicy.Choose(views[1], placement, size)
		if a.Index == home || b.Index == home {
			t.Fatalf("%s request of %d bytes, with its home's queue 40 KiB longer: %+v and %+v, want both moved from %d",
				kind, size, a, b, home)
		}
	}
	// Two requests queued at one engine, both from one edge, can still
	// tell a short request's edges apart: 1 in 25 may disagree.
	for _, kind := range []string{"cold", "warm"} {
		if d := disagree[kind+", sticky"]; d > trials/2/25 {
			t.Errorf("the sticky cost: edges disagree on %d of %d %s placements, want at most %d", d, trials/2, kind, trials/2/25)
		}
	}
	for _, key := range []string{"cold, rules", "cold, cost", "warm, cost"} {
		if disagree[key] < trials/10 {
			t.Errorf("%s: edges disagree on %d of %d placements; the test no longer shows what Sticky is for", key, disagree[key], trials/2)
		}
	}
	t.Logf("placements on which two edges' private views disagree, of %d of each kind: %v", trials/2, disagree)
}

// randomCostCase draws a cost policy and candidates whose figures are
// exact in float64, so the reference's different sum ties as Choose's.
func randomCostCase(rng *rand.Rand) (Policy, []Candidate) {
	p := Policy{
		LoadFactor:  1 + 2*rng.Float64(),
		Allowance:   rng.IntN(6),
		MinDepth:    1 + rng.IntN(5),
		Cost:        true,
		ChunkSize:   1 << rng.IntN(10),
		NsPerByte:   float64(rng.IntN(4)),
		CacheWeight: []float64{0, 0.5, 1, 2, 8}[rng.IntN(5)],
		Sticky:      rng.IntN(2) == 0,
	}
	if rng.IntN(2) == 0 {
		p.ByteAllowance = rng.Int64N(1 << 12)
	}
	if rng.IntN(3) == 0 { // read by the rules only
		p.ColdLoadFactor, p.ColdBacklog = 1, true
	}
	n := rng.IntN(13)
	cands := make([]Candidate, n)
	maxLoad := 1 + rng.IntN(40)
	idle := rng.IntN(3) == 0
	for i := range cands {
		cands[i] = Candidate{Key: dialKey(i), Depth: rng.IntN(12), Load: rng.IntN(maxLoad), Bytes: rng.Int64N(1 << 14)}
		if rng.IntN(4) == 0 {
			cands[i].Load *= 5
		}
		if !idle && rng.IntN(2) == 0 {
			cands[i].Backlog = rng.Int64N(1 << 15)
		}
		if !idle && rng.IntN(3) == 0 {
			cands[i].NsPerByte = float64(rng.IntN(5))
		}
	}
	return p, cands
}

// TestChooseCostProperties runs the cost on random inputs and checks it
// against the reference, the invariants, its independence from the
// order of the candidates and its determinism.
func TestChooseCostProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 20000 {
		p, cands := randomCostCase(rng)
		if iter%10 == 0 { // invalid: the last resort must still be sane
			p.LoadFactor = rng.Float64()
		}
		placement := rng.Uint64()
		size := rng.Int64N(1 << 14)
		got := p.Choose(cands, placement, size)
		checkCost(t, p, cands, placement, size, got)
		if again := p.Choose(cands, placement, size); again != got {
			t.Fatalf("%+v.Choose(%v, %#x, %d) = %+v, then %+v", p, cands, placement, size, got, again)
		}
		if len(cands) == 0 {
			continue
		}
		shuffled := slices.Clone(cands)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		sgot := p.Choose(shuffled, placement, size)
		if shuffled[sgot.Index] != cands[got.Index] || shuffled[sgot.Preferred] != cands[got.Preferred] || sgot.Reason != got.Reason {
			t.Fatalf("%+v.Choose(%v, %#x, %d) = %+v, but shuffled to %v it chose %+v", p, cands, placement, size, got, shuffled, sgot)
		}
	}
}

// TestChooseCostExtremes checks that huge and invalid figures keep the
// choice defined: under the bound, and never a NaN cost winning.
func TestChooseCostExtremes(t *testing.T) {
	huge := costPolicy
	huge.NsPerByte, huge.CacheWeight = math.MaxFloat64, math.MaxFloat64
	invalid := costPolicy
	invalid.NsPerByte, invalid.CacheWeight, invalid.ChunkSize = math.NaN(), math.Inf(1), -5
	cands := []Candidate{
		{rk[1], math.MaxInt, 0, 0, math.MaxInt64, math.Inf(1)},
		{rk[0], 0, 0, 0, math.MaxInt64, math.NaN()},
		{rk[2], 5, 0, 0, -7, -1},
	}
	for _, p := range []Policy{huge, invalid} {
		for _, size := range []int64{0, 1, math.MaxInt64} {
			got := p.Choose(cands, tp, size)
			// Overflow makes the reference's sum differ from Choose's;
			// what must hold is a defined choice under the bound.
			if got.Index < 0 || got.Index >= len(cands) || got.Reason == ReasonLeastLoaded || got.Spilled != (got.Index != got.Preferred) {
				t.Errorf("%+v.Choose(%s, %#x, %d) = %+v, want a candidate under the bound", p, show(cands), tp, size, got)
			}
		}
	}
}
