package selection

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// dialKey is a Candidate.Key as the caller derives it: a hash of the Dial.
func dialKey(i int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "10.0.0.%d:8000", i)
	return h.Sum64()
}

// tp is the placement key of the table tests, and rk[i] the key of the
// upstream that ranks i-th for it by rendezvous hashing: rk[0] wins.
const tp = 0x5eed

var rk = rankedKeys(tp, 8)

func rankedKeys(placement uint64, n int) []uint64 {
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = dialKey(i)
	}
	slices.SortFunc(keys, func(a, b uint64) int { return cmp.Compare(score(placement, b), score(placement, a)) })
	return keys
}

// show prints candidates with their rank names, for failure messages.
func show(cands []Candidate) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, c := range cands {
		if i > 0 {
			b.WriteByte(' ')
		}
		name := fmt.Sprintf("%#x", c.Key)
		if r := slices.Index(rk, c.Key); r >= 0 {
			name = fmt.Sprintf("rk%d", r)
		}
		fmt.Fprintf(&b, "{%s depth=%d load=%d", name, c.Depth, c.Load)
		if c.Backlog != 0 {
			fmt.Fprintf(&b, " backlog=%d", c.Backlog)
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.String()
}

func TestChoose(t *testing.T) {
	strict := Policy{LoadFactor: 1.25, Allowance: 0, MinDepth: 4}
	def := Policy{LoadFactor: DefaultLoadFactor, Allowance: DefaultAllowance, MinDepth: DefaultMinDepth}
	tests := []struct {
		name  string
		p     Policy
		cands []Candidate
		want  Choice
	}{
		{"no candidates", strict, nil,
			Choice{Index: -1, Preferred: -1, Reason: ReasonNone}},
		{"empty candidates", def, []Candidate{},
			Choice{Index: -1, Preferred: -1, Reason: ReasonNone}},
		{"single candidate", strict, []Candidate{{rk[5], 0, 100, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonCold, Bound: 127}},

		// Warm requests.
		{"deepest holder wins over HRW rank", strict,
			[]Candidate{{rk[0], 5, 0, 0, 0, 0}, {rk[3], 9, 0, 0, 0, 0}, {rk[1], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonMatch, Bound: 1}},
		{"equally deep holders tie by HRW", strict,
			[]Candidate{{rk[2], 8, 0, 0, 0, 0}, {rk[1], 8, 0, 0, 0, 0}, {rk[0], 3, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonMatch, Bound: 1}},
		// bound = ceil(1.25 * 10 / 4) = 4: the depth-9 holder (6) is over.
		{"bound spills to the next-deepest holder", strict,
			[]Candidate{{rk[0], 0, 0, 0, 0, 0}, {rk[2], 9, 6, 0, 0, 0}, {rk[3], 5, 0, 0, 0, 0}, {rk[1], 7, 3, 0, 0, 0}},
			Choice{Index: 3, Preferred: 1, Reason: ReasonSpill, Spilled: true, Bound: 4}},
		// bound = ceil(1.25 * 11 / 4) = 4: depth 9 (6) and depth 7 (4) are over.
		{"spill passes over holders over the bound", strict,
			[]Candidate{{rk[2], 9, 6, 0, 0, 0}, {rk[1], 7, 4, 0, 0, 0}, {rk[3], 5, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 2, Preferred: 0, Reason: ReasonSpill, Spilled: true, Bound: 4}},
		// bound = ceil(1.25 * 6 / 4) = 2
		{"spill among equally deep holders by HRW", strict,
			[]Candidate{{rk[0], 8, 5, 0, 0, 0}, {rk[2], 8, 0, 0, 0, 0}, {rk[1], 8, 0, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}},
			Choice{Index: 2, Preferred: 0, Reason: ReasonSpill, Spilled: true, Bound: 2}},
		// bound = ceil(1.25 * 12 / 4) = 4: both holders (5) are over; rk0
		// wins although rk1 has less load.
		{"no holder under the bound spills to the HRW winner under it", strict,
			[]Candidate{{rk[3], 10, 5, 0, 0, 0}, {rk[4], 6, 5, 0, 0, 0}, {rk[1], 0, 0, 0, 0, 0}, {rk[0], 0, 1, 0, 0, 0}},
			Choice{Index: 3, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 4}},

		// Cold requests.
		{"cold goes to the HRW winner", strict,
			[]Candidate{{rk[2], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[1], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 1}},
		{"matches shallower than MinDepth are cold", strict,
			[]Candidate{{rk[1], 3, 0, 0, 0, 0}, {rk[0], 1, 0, 0, 0, 0}, {rk[2], 3, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 1}},
		{"MinDepth 3 makes the same matches warm", Policy{LoadFactor: 1.25, MinDepth: 3},
			[]Candidate{{rk[1], 3, 0, 0, 0, 0}, {rk[0], 1, 0, 0, 0, 0}, {rk[2], 3, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 1}},
		{"MinDepth 1 makes one chunk a match", Policy{LoadFactor: 1.25, MinDepth: 1},
			[]Candidate{{rk[1], 1, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 1}},
		{"MinDepth 0 counts as 1", Policy{LoadFactor: 1.25},
			[]Candidate{{rk[1], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 1}},
		// bound = ceil(1.25 * 8 / 4) = 3: rk0 (4) and rk1 (3) are over.
		{"cold HRW winner over the bound spills down the HRW ranking", strict,
			[]Candidate{{rk[0], 0, 4, 0, 0, 0}, {rk[1], 0, 3, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 3, Preferred: 0, Reason: ReasonColdSpill, Spilled: true, Bound: 3}},
		{"equal keys tie to the lower index", strict,
			[]Candidate{{rk[1], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 1}},

		// The cold bound: ceil(1 * (4+1) / 4) = 2, under the bound of
		// ceil(1.25 * 5 / 4) + 2 = 4.
		{"cold bound moves a new prompt off a busier HRW winner", Policy{LoadFactor: 1.25, Allowance: 2, MinDepth: 4, ColdLoadFactor: 1},
			[]Candidate{{rk[0], 0, 2, 0, 0, 0}, {rk[1], 0, 2, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 3, Preferred: 0, Reason: ReasonColdSpill, Spilled: true, Bound: 4, ColdBound: 2}},
		{"cold bound keeps the HRW winner at the mean", Policy{LoadFactor: 1.25, Allowance: 2, MinDepth: 4, ColdLoadFactor: 1},
			[]Candidate{{rk[0], 0, 1, 0, 0, 0}, {rk[1], 0, 3, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonCold, Bound: 4, ColdBound: 2}},
		{"cold bound leaves warm requests alone", Policy{LoadFactor: 1.25, Allowance: 2, MinDepth: 4, ColdLoadFactor: 1},
			[]Candidate{{rk[0], 0, 0, 0, 0, 0}, {rk[1], 0, 0, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}, {rk[2], 9, 2, 0, 0, 0}},
			Choice{Index: 3, Preferred: 3, Reason: ReasonMatch, Bound: 3}},
		{"idle fleet: the cold bound is the HRW winner's", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: 1},
			[]Candidate{{rk[2], 0, 0, 0, 0, 0}, {rk[1], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}},
			Choice{Index: 2, Preferred: 2, Reason: ReasonCold, Bound: 17, ColdBound: 1}},

		// Last resort: only an invalid policy (bound 0 here) gets there.
		{"least loaded when no candidate is under the bound", Policy{MinDepth: 4},
			[]Candidate{{rk[0], 9, 3, 0, 0, 0}, {rk[1], 0, 1, 0, 0, 0}, {rk[2], 0, 2, 0, 0, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonLeastLoaded, Spilled: true}},
		{"least loaded ties by HRW and may be the preferred", Policy{MinDepth: 4},
			[]Candidate{{rk[2], 0, 1, 0, 0, 0}, {rk[0], 0, 1, 0, 0, 0}, {rk[1], 0, 1, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonLeastLoaded}},

		// The bound's edges and the allowance. bound = ceil(4/4) + 2 = 3.
		{"Load+1 equal to the bound is under", Policy{LoadFactor: 1, Allowance: 2, MinDepth: 4},
			[]Candidate{{rk[1], 9, 2, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}, {rk[3], 0, 1, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 3}},
		{"Load equal to the bound is over", Policy{LoadFactor: 1, Allowance: 2, MinDepth: 4},
			[]Candidate{{rk[1], 9, 3, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 3}},
		// bound = ceil(1.25 * 3 / 4) + 8 = 9
		{"allowance keeps affinity at low load", Policy{LoadFactor: 1.25, Allowance: 8, MinDepth: 4},
			[]Candidate{{rk[2], 12, 2, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[1], 0, 0, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 9}},
		{"without allowance the same load spills", strict,
			[]Candidate{{rk[2], 12, 2, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[1], 0, 0, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 1}},
		// bound = ceil(1.25 * 24 / 4) + 16 = 24
		{"defaults keep a holder at 23 in flight beside idle peers", def,
			[]Candidate{{rk[2], 12, 23, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[1], 0, 0, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 24}},
		// bound = ceil(1.25 * 25 / 4) + 16 = 24
		{"defaults spill a holder at 24 in flight beside idle peers", def,
			[]Candidate{{rk[2], 12, 24, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[1], 0, 0, 0, 0, 0}, {rk[3], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 0, Reason: ReasonSpillCold, Spilled: true, Bound: 24}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Choose(tt.cands, tp, 0)
			if got != tt.want {
				t.Errorf("%+v.Choose(%s, %#x) = %+v, want %+v", tt.p, show(tt.cands), tp, got, tt.want)
			}
		})
	}
}

func TestChooseDoesNotModify(t *testing.T) {
	p := Policy{LoadFactor: DefaultLoadFactor, MinDepth: DefaultMinDepth}
	cands := []Candidate{{rk[0], 9, 6, 0, 0, 0}, {rk[1], 5, 0, 0, 0, 0}, {rk[2], 0, 1, 0, 0, 0}}
	orig := slices.Clone(cands)
	p.Choose(cands, tp, 0)
	if !slices.Equal(cands, orig) {
		t.Errorf("Choose(%s, %#x) modified its candidates to %s", show(orig), tp, show(cands))
	}
}

func TestChooseAllocs(t *testing.T) {
	p := Policy{LoadFactor: DefaultLoadFactor, Allowance: DefaultAllowance, MinDepth: DefaultMinDepth}
	withBacklog := p
	withBacklog.ColdBacklog = true
	cost := costPolicy
	for _, n := range []int{0, 1, 16, 256} {
		for _, warm := range []bool{false, true} {
			cands := benchCands(n, warm)
			placement := uint64(1)
			allocs := testing.AllocsPerRun(100, func() {
				placement++
				p.Choose(cands, placement, 0)
				withBacklog.Choose(cands, placement, 4096)
				cost.Choose(cands, placement, 4096)
				stickyPolicy.Choose(cands, placement, 4096)
			})
			if allocs != 0 {
				t.Errorf("Choose(%d candidates, warm=%v) allocates %v times, want 0", n, warm, allocs)
			}
		}
	}
}

// refChoose is Choose written the slow, obvious way: sort by the rules,
// take the first that fits, then apply ColdBacklog.
func refChoose(p Policy, cands []Candidate, placement uint64, size int64) Choice {
	ch := refChooseBound(p, cands, placement, size)
	if !p.ColdBacklog || (ch.Reason != ReasonCold && ch.Reason != ReasonColdSpill) {
		return ch
	}
	bound, byteBound, coldBound := ch.Bound, ch.ByteBound, p.ColdBound(cands)
	eligible := func(i int) bool {
		return cands[i].Load+1 <= bound && (byteBound == 0 || cands[i].Bytes <= byteBound) &&
			(coldBound == 0 || cands[i].Load+1 <= coldBound)
	}
	// The eligible candidate with the least backlog, the higher-ranked
	// on a tie.
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(score(placement, cands[b].Key), score(placement, cands[a].Key))
	})
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(cands[a].Backlog, cands[b].Backlog) })
	for _, i := range order {
		if eligible(i) {
			if cands[i].Backlog < cands[ch.Index].Backlog {
				ch.Index, ch.Reason = i, ReasonPrefill
				ch.Spilled = ch.Index != ch.Preferred
			}
			break
		}
	}
	return ch
}

// refChooseBound is refChoose without ColdBacklog.
func refChooseBound(p Policy, cands []Candidate, placement uint64, size int64) Choice {
	if len(cands) == 0 {
		return Choice{Index: -1, Preferred: -1, Reason: ReasonNone}
	}
	bound := p.Bound(cands)
	// The byte bound, written out from its definition.
	var byteBound int64
	if p.ByteAllowance > 0 {
		sum := float64(size)
		for _, c := range cands {
			sum += float64(c.Bytes)
		}
		// A negative or NaN product (invalid policies) counts as 0.
		byteBound = int64(max(0, math.Ceil(p.LoadFactor*sum/float64(len(cands))))) + p.ByteAllowance
	}
	under := func(i int) bool {
		return cands[i].Load+1 <= bound && (byteBound == 0 || cands[i].Bytes <= byteBound)
	}
	// The cold bound, written out from its definition.
	var coldBound int
	if p.ColdLoadFactor != 0 {
		sum := 0
		for _, c := range cands {
			sum += c.Load
		}
		// A negative or NaN product (invalid policies) counts as 0,
		// a huge one is capped as the bound's is.
		term := math.Ceil(p.ColdLoadFactor * float64(sum+1) / float64(len(cands)))
		if !(term > 0) {
			term = 0
		}
		coldBound = min(bound, int(min(term, math.MaxInt32)))
	}
	// All candidates by HRW score, highest first; equal scores by index.
	byHRW := make([]int, len(cands))
	for i := range byHRW {
		byHRW[i] = i
	}
	slices.SortStableFunc(byHRW, func(a, b int) int {
		return cmp.Compare(score(placement, cands[b].Key), score(placement, cands[a].Key))
	})
	var holders []int
	for _, i := range byHRW {
		if cands[i].Depth >= max(p.MinDepth, 1) {
			holders = append(holders, i)
		}
	}
	slices.SortStableFunc(holders, func(a, b int) int { return cmp.Compare(cands[b].Depth, cands[a].Depth) })
	byLoad := slices.Clone(byHRW)
	slices.SortStableFunc(byLoad, func(a, b int) int { return cmp.Compare(cands[a].Load, cands[b].Load) })

	pick := func(i, preferred int, r Reason) Choice {
		return Choice{Index: i, Preferred: preferred, Reason: r, Spilled: i != preferred, Bound: bound, ByteBound: byteBound}
	}
	if len(holders) > 0 {
		for _, i := range holders {
			if under(i) {
				if i == holders[0] {
					return pick(i, holders[0], ReasonMatch)
				}
				return pick(i, holders[0], ReasonSpill)
			}
		}
		for _, i := range byHRW {
			if under(i) {
				return pick(i, holders[0], ReasonSpillCold)
			}
		}
		return pick(byLoad[0], holders[0], ReasonLeastLoaded)
	}
	pickCold := func(i int, r Reason) Choice {
		ch := pick(i, byHRW[0], r)
		ch.ColdBound = coldBound
		return ch
	}
	for _, i := range byHRW {
		if under(i) && (coldBound == 0 || cands[i].Load+1 <= coldBound) {
			if i == byHRW[0] {
				return pickCold(i, ReasonCold)
			}
			return pickCold(i, ReasonColdSpill)
		}
	}
	for _, i := range byHRW {
		if under(i) {
			return pickCold(i, ReasonColdSpill)
		}
	}
	return pickCold(byLoad[0], ReasonLeastLoaded)
}

// checkChoice checks got = p.Choose(cands, placement, size) against
// refChoose and the invariants every choice keeps.
func checkChoice(t *testing.T, p Policy, cands []Candidate, placement uint64, size int64, got Choice) {
	t.Helper()
	call := fmt.Sprintf("%+v.Choose(%v, %#x, %d)", p, cands, placement, size)
	if want := refChoose(p, cands, placement, size); got != want {
		t.Fatalf("%s = %+v, want %+v (reference)", call, got, want)
	}
	if len(cands) == 0 {
		return
	}
	if got.Index < 0 || got.Index >= len(cands) || got.Preferred < 0 || got.Preferred >= len(cands) {
		t.Fatalf("%s = %+v, want Index and Preferred in [0, %d)", call, got, len(cands))
	}
	if got.Spilled != (got.Index != got.Preferred) {
		t.Fatalf("%s = %+v, want Spilled == (Index != Preferred)", call, got)
	}
	if got.Bound != p.Bound(cands) {
		t.Fatalf("%s = %+v, want Bound %d", call, got, p.Bound(cands))
	}
	if got.ByteBound != p.ByteBound(cands, size) {
		t.Fatalf("%s = %+v, want ByteBound %d", call, got, p.ByteBound(cands, size))
	}
	// Preferred is a holder exactly when the request is warm.
	if cold := cands[got.Preferred].Depth < max(p.MinDepth, 1); cold && got.ColdBound != p.ColdBound(cands) || !cold && got.ColdBound != 0 {
		t.Fatalf("%s = %+v, want ColdBound %d for a cold request, 0 for a warm one", call, got, p.ColdBound(cands))
	}
	// With a valid policy and the byte bound off, a cold request always
	// finds a candidate within the cold bound: the least loaded.
	if p.Validate() == nil && p.ByteAllowance == 0 && got.ColdBound > 0 && cands[got.Index].Load+1 > got.ColdBound {
		t.Fatalf("%s = %+v: a cold request placed above the cold bound", call, got)
	}
	isUnder := func(c Candidate) bool {
		return c.Load+1 <= got.Bound && (got.ByteBound == 0 || c.Bytes <= got.ByteBound)
	}
	anyUnder := slices.ContainsFunc(cands, isUnder)
	if anyUnder && !isUnder(cands[got.Index]) {
		t.Fatalf("%s = %+v: chose load %d, %d bytes over the bound although a candidate is under it",
			call, got, cands[got.Index].Load, cands[got.Index].Bytes)
	}
	if anyUnder == (got.Reason == ReasonLeastLoaded) {
		t.Fatalf("%s = %+v: reason %v with a candidate under the bound: %v", call, got, got.Reason, anyUnder)
	}
	if p.Validate() == nil && p.ByteAllowance == 0 && !anyUnder {
		t.Fatalf("%s: valid policy, non-negative loads, and no candidate under bound %d", call, got.Bound)
	}
	// With a valid policy the fewest bytes in flight are always within
	// the byte bound.
	if p.Validate() == nil && got.ByteBound > 0 && !slices.ContainsFunc(cands, func(c Candidate) bool { return c.Bytes <= got.ByteBound }) {
		t.Fatalf("%s: no candidate within byte bound %d", call, got.ByteBound)
	}
	warm := slices.ContainsFunc(cands, func(c Candidate) bool { return c.Depth >= max(p.MinDepth, 1) })
	switch got.Reason {
	case ReasonMatch, ReasonSpill, ReasonSpillCold:
		if !warm {
			t.Fatalf("%s = %+v: reason %v for a cold request", call, got, got.Reason)
		}
	case ReasonCold, ReasonColdSpill:
		if warm {
			t.Fatalf("%s = %+v: reason %v for a warm request", call, got, got.Reason)
		}
	case ReasonPrefill:
		if warm || !p.ColdBacklog {
			t.Fatalf("%s = %+v: reason %v for a warm request or with ColdBacklog off", call, got, got.Reason)
		}
	}
	// The backlog only moves a cold request to a candidate with less of
	// it, and with no backlog anywhere it moves nothing.
	if p.ColdBacklog {
		off := p
		off.ColdBacklog = false
		base := off.Choose(cands, placement, size)
		idle := !slices.ContainsFunc(cands, func(c Candidate) bool { return c.Backlog != 0 })
		if (idle || warm) && got.Index != base.Index {
			t.Fatalf("%s = %+v: the backlog moved a request from %d (idle fleet: %v)", call, got, base.Index, idle)
		}
		if got.Reason == ReasonPrefill && cands[got.Index].Backlog >= cands[base.Index].Backlog {
			t.Fatalf("%s = %+v: moved from %d, which has no more backlog", call, got, base.Index)
		}
	}
}

// TestChooseProperties runs Choose on random inputs, valid and invalid
// policies, and checks it against the reference, the invariants, and its
// independence from the order of the candidates.
func TestChooseProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 20000 {
		p := Policy{
			LoadFactor: 1 + 2*rng.Float64(),
			Allowance:  rng.IntN(6),
			MinDepth:   1 + rng.IntN(5),
		}
		if iter%2 == 0 {
			p.ByteAllowance = rng.Int64N(1 << 12)
		}
		if iter%3 != 0 {
			p.ColdLoadFactor = 1 + (p.LoadFactor-1)*rng.Float64()
		}
		if iter%4 != 0 {
			p.ColdBacklog = true
		}
		if iter%10 == 0 { // invalid: the last resort must still be sane
			p.LoadFactor = rng.Float64()
		}
		n := rng.IntN(13)
		cands := make([]Candidate, n)
		maxLoad := 1 + rng.IntN(40)
		for i := range cands {
			cands[i] = Candidate{Key: dialKey(i), Depth: rng.IntN(10), Load: rng.IntN(maxLoad), Bytes: rng.Int64N(1 << 14)}
			if rng.IntN(4) == 0 { // a hot spot
				cands[i].Load *= 5
			}
			if rng.IntN(4) == 0 { // a long context
				cands[i].Bytes *= 8
			}
			if rng.IntN(3) == 0 { // a prefill queued
				cands[i].Backlog = rng.Int64N(1 << 15)
			}
		}
		distinct := true
		if n > 1 && iter%7 == 0 { // the same upstream twice
			cands[n-1].Key = cands[0].Key
			distinct = false
		}
		placement := rng.Uint64()
		size := rng.Int64N(1 << 15)
		got := p.Choose(cands, placement, size)
		checkChoice(t, p, cands, placement, size, got)

		if !distinct || n == 0 {
			continue
		}
		perm := rng.Perm(n)
		shuffled := make([]Candidate, n)
		for i, j := range perm {
			shuffled[i] = cands[j]
		}
		sgot := p.Choose(shuffled, placement, size)
		if shuffled[sgot.Index] != cands[got.Index] || shuffled[sgot.Preferred] != cands[got.Preferred] ||
			sgot.Reason != got.Reason || sgot.Bound != got.Bound || sgot.ByteBound != got.ByteBound || sgot.ColdBound != got.ColdBound {
			t.Fatalf("%+v.Choose(%v, %#x) = %+v, but shuffled to %v it chose %+v",
				p, cands, placement, got, shuffled, sgot)
		}
	}
}

func FuzzChoose(f *testing.F) {
	f.Add([]byte{}, uint64(0), 1.25, 16, 4, int64(0), int64(0), 0.0, false)
	f.Add([]byte{1, 9, 0, 2, 0, 2, 0, 0, 3, 9, 3, 5, 7, 1, 0}, uint64(7), 1.0, 0, 1, int64(100), int64(50), 1.0, true)
	f.Add([]byte{1, 9, 200, 9, 0, 2, 1, 3, 0, 1, 3, 5, 7, 200, 0, 4, 4, 4, 4, 4}, uint64(1<<63), 0.0, 0, 0, int64(1), int64(1000), 0.0, true)
	f.Add([]byte{1, 0, 9, 0, 0, 2, 0, 0, 0, 7, 3, 0, 1, 0, 0, 4, 0, 0, 0, 0}, uint64(3), 2.0, 16, 4, int64(0), int64(0), 1.0, true)
	f.Fuzz(func(t *testing.T, data []byte, placement uint64, loadFactor float64, allowance, minDepth int, byteAllowance, size int64, coldLoadFactor float64, coldBacklog bool) {
		p := Policy{LoadFactor: loadFactor, Allowance: allowance, MinDepth: minDepth, ByteAllowance: byteAllowance, ColdLoadFactor: coldLoadFactor, ColdBacklog: coldBacklog}
		size = max(size, 0)
		var cands []Candidate
		for ; len(data) >= 5; data = data[5:] {
			// Few distinct keys, so equal keys happen too.
			cands = append(cands, Candidate{Key: dialKey(int(data[0] % 16)), Depth: int(data[1] % 16), Load: int(data[2]),
				Bytes: int64(data[3]) * 64, Backlog: int64(data[4]) * 256})
		}
		checkChoice(t, p, cands, placement, size, p.Choose(cands, placement, size))

		// The same candidates under the cost, with speeds taken from the
		// key bytes' high bits and figures small enough to stay exact in
		// float64 (so the reference ties as Choose does).
		for i := range cands {
			cands[i].NsPerByte = float64(cands[i].Key>>62) / 2
		}
		p.Cost, p.ChunkSize = true, 1+max(minDepth, 0)%512
		p.NsPerByte = float64(placement % 4)
		p.CacheWeight = []float64{0, 0.5, 1, 2, 8}[placement>>2%5]
		p.Sticky = placement>>5%2 == 0
		size %= 1 << 24
		checkCost(t, p, cands, placement, size, p.Choose(cands, placement, size))
	})
}

// TestColdBacklog pins ColdBacklog on hand-worked cases. bound =
// ceil(1.25 x 1 / 3) + 16 = 17, cold bound ceil(1 x 1 / 3) = 1.
func TestColdBacklog(t *testing.T) {
	p := Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: 1, ColdBacklog: true}
	tests := []struct {
		name  string
		p     Policy
		cands []Candidate
		want  Choice
	}{
		{"no backlog: the HRW winner", p,
			[]Candidate{{rk[1], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 17, ColdBound: 1}},
		{"the HRW winner when it has no backlog", p,
			[]Candidate{{rk[1], 0, 0, 0, 3000, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 1, Preferred: 1, Reason: ReasonCold, Bound: 17, ColdBound: 1}},
		{"the least backlog, then the higher rank", p,
			[]Candidate{{rk[2], 0, 0, 0, 0, 0}, {rk[0], 0, 0, 0, 3000, 0}, {rk[1], 0, 0, 0, 0, 0}},
			Choice{Index: 2, Preferred: 1, Reason: ReasonPrefill, Spilled: true, Bound: 17, ColdBound: 1}},
		{"the least backlog even if all have some", p,
			[]Candidate{{rk[2], 0, 0, 0, 500, 0}, {rk[0], 0, 0, 0, 3000, 0}, {rk[1], 0, 0, 0, 900, 0}},
			Choice{Index: 0, Preferred: 1, Reason: ReasonPrefill, Spilled: true, Bound: 17, ColdBound: 1}},
		// cold bound ceil(1 x 3 / 3) = 1: rk[2], carrying 2, is over it.
		{"never over the cold bound", p,
			[]Candidate{{rk[2], 0, 2, 0, 0, 0}, {rk[0], 0, 0, 0, 3000, 0}, {rk[1], 0, 0, 0, 900, 0}},
			Choice{Index: 2, Preferred: 1, Reason: ReasonPrefill, Spilled: true, Bound: 18, ColdBound: 1}},
		{"a warm request stays on its holder", p,
			[]Candidate{{rk[1], 8, 0, 0, 9000, 0}, {rk[0], 0, 0, 0, 0, 0}, {rk[2], 0, 0, 0, 0, 0}},
			Choice{Index: 0, Preferred: 0, Reason: ReasonMatch, Bound: 17}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Choose(tt.cands, tp, 0)
			if got != tt.want {
				t.Errorf("%+v.Choose(%s, %#x) = %+v, want %+v", tt.p, show(tt.cands), tp, got, tt.want)
			}
			checkChoice(t, tt.p, tt.cands, tp, 0, got)
		})
	}
}
