package prefixindex

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// An upstream with a capacity is believed to hold only the chunks most
// recently sent to it: its older prompts are evicted as its engine
// evicts them, while an upstream without one keeps everything the index
// holds.
func TestCapacityEvictsLeastRecentlyUsed(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 4096, Shards: 4})
	a, b := intern(t, ix, "a"), intern(t, ix, "b")
	ix.SetCapacity(a, 40)
	var prompts [][]Hash
	for i := range 20 {
		hs := hashes(fmt.Sprint("prompt", i), 4)
		prompts = append(prompts, hs)
		ix.Record(Scope{}, hs, a)
		ix.Confirm(Scope{}, hs, a)
		ix.Record(Scope{}, hashes(fmt.Sprint("other", i), 4), b)
	}
	checkInvariants(t, ix)
	// 80 chunks were new to a. Each prompt's Confirm, once its answer is
	// written, stamps it at the clock after its 4 chunks (an engine frees
	// a request's blocks to its LRU when the request ends): prompt i at
	// 4(i+1). Within 40 of the clock's 80 are prompts 9 to 19.
	for i, hs := range prompts {
		want := 0
		if i >= 9 {
			want = 4
		}
		if got := depthsOf(ix, hs, a)[0]; got != want {
			t.Errorf("prompt %d: depth %d at a, want %d", i, got, want)
		}
	}
	if chunks, sent := ix.Capacity(a); chunks != 40 || sent != 80 {
		t.Errorf("Capacity(a) = %d chunks, %d sent; want 40 and 80 (Confirm sends nothing new)", chunks, sent)
	}
	owned := ix.Owned()
	if owned["a"] != 44 || owned["b"] != 80 {
		t.Errorf("Owned = a %d, b %d; want 44 and 80", owned["a"], owned["b"])
	}
	// The evicted owners are still in their entries, unseen: lifting the
	// capacity shows them again.
	ix.SetCapacity(a, 0)
	if got := depthsOf(ix, prompts[0], a)[0]; got != 4 {
		t.Errorf("prompt 0 with a's capacity lifted: depth %d, want 4", got)
	}
}

// A prefix sent again is recent again, and costs its engine nothing new:
// a system prompt every request shares stays, however much else is sent.
func TestCapacityKeepsWhatIsUsed(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 4096, Shards: 1})
	a := intern(t, ix, "a")
	ix.SetCapacity(a, 8)
	system := hashes("system", 4)
	for i := range 10 {
		hs := append(append([]Hash(nil), system...), hashes(fmt.Sprint("question", i), 2)...)
		ix.Record(Scope{}, hs, a)
	}
	if got := depthsOf(ix, system, a)[0]; got != 4 {
		t.Errorf("the shared system prompt has depth %d at a, want 4", got)
	}
	if _, sent := ix.Capacity(a); sent != 4+10*2 {
		t.Errorf("%d chunks counted new to a, want 24: the system prompt once, two per question", sent)
	}
	checkInvariants(t, ix)
}

// A prefix the engine evicted and is sent again counts as new (it is
// prefilled again) and is held again.
func TestCapacityResentAfterEviction(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 4096, Shards: 2})
	a := intern(t, ix, "a")
	ix.SetCapacity(a, 10)
	old := hashes("old", 5)
	ix.Record(Scope{}, old, a)
	ix.Record(Scope{}, hashes("flood", 20), a)
	if got := depthsOf(ix, old, a)[0]; got != 0 {
		t.Fatalf("old prompt after 20 new chunks: depth %d, want 0", got)
	}
	ix.Record(Scope{}, old, a)
	if got := depthsOf(ix, old, a)[0]; got != 5 {
		t.Errorf("old prompt sent again: depth %d, want 5", got)
	}
	if _, sent := ix.Capacity(a); sent != 30 {
		t.Errorf("%d chunks sent, want 30 (5 + 20 + the 5 evicted ones again)", sent)
	}
}

// Forget clears an upstream's capacity with its ID: a new upstream given
// the ID starts unbounded, with its clock at zero.
func TestCapacityForgotten(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 4096, Shards: 4})
	a := intern(t, ix, "a")
	ix.SetCapacity(a, 10)
	ix.Record(Scope{}, hashes("x", 50), a)
	ix.Forget("a")
	ix.maxIDs = 1 // the next ID handed out is a's
	a2 := intern(t, ix, "a2")
	if a2 != a {
		t.Fatalf("re-interned as %d, want the reused ID %d", a2, a)
	}
	if chunks, sent := ix.Capacity(a2); chunks != 0 || sent != 0 {
		t.Errorf("reused ID: capacity %d, clock %d; want none", chunks, sent)
	}
	hs := hashes("y", 50)
	ix.Record(Scope{}, hs, a2)
	if got := depthsOf(ix, hs, a2)[0]; got != 50 {
		t.Errorf("depth %d, want 50: no capacity applies to the new upstream", got)
	}
	checkInvariants(t, ix)
}

// capModel is the reference: each upstream's engine as an LRU of its
// capacity in chunks (unbounded without one), fed the chunks each Record
// sends it.
type capModel struct {
	limit map[ID]int
	clock map[ID]uint32
	stamp map[ID]map[Hash]uint32
}

func (m *capModel) record(hs []Hash, id ID) {
	if m.stamp[id] == nil {
		m.stamp[id] = map[Hash]uint32{}
	}
	now, fresh := m.clock[id], uint32(0)
	for _, h := range hs {
		st, ok := m.stamp[id][h]
		if !ok || m.limit[id] != 0 && now-st > uint32(m.limit[id]) {
			fresh++
		}
		m.stamp[id][h] = now
	}
	m.clock[id] += fresh
}

func (m *capModel) depth(hs []Hash, id ID) int {
	for k := len(hs) - 1; k >= 0; k-- {
		st, ok := m.stamp[id][hs[k]]
		if ok && (m.limit[id] == 0 || m.clock[id]-st <= uint32(m.limit[id])) {
			return k + 1
		}
	}
	return 0
}

// Random records, confirmations and capacity changes over four upstreams
// (so no entry loses an owner to a fifth) in an index too large to evict:
// every depth agrees with the reference LRUs.
func TestCapacityModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ix := newIndex(t, Config{MaxEntries: 1 << 16, Shards: 8})
	ix.TrackCapacities() // every clock runs from the start, as the model's
	m := &capModel{limit: map[ID]int{}, clock: map[ID]uint32{}, stamp: map[ID]map[Hash]uint32{}}
	var ids []ID
	for _, n := range []string{"a", "b", "c", "d"} {
		ids = append(ids, intern(t, ix, n))
	}
	families := make([][]Hash, 40)
	for i := range families {
		families[i] = hashes(fmt.Sprint("fam", i), 32)
	}
	for step := range 6000 {
		id := ids[r.IntN(len(ids))]
		fam := families[r.IntN(len(families))]
		hs := fam[:1+r.IntN(len(fam))]
		switch op := r.IntN(100); {
		case op < 2:
			c := r.IntN(200)
			ix.SetCapacity(id, c)
			m.limit[id] = c
		case op < 45:
			ix.Record(Scope{}, hs, id)
			m.record(hs, id)
		case op < 60:
			ix.Confirm(Scope{}, hs, id)
			m.record(hs, id)
		default:
			for _, x := range ids {
				if got, want := depthsOf(ix, hs, x)[0], m.depth(hs, x); got != want {
					t.Fatalf("step %d: depth of %d chunks at %d = %d, want %d (capacity %d, clock %d)", step, len(hs), x, got, want, m.limit[x], m.clock[x])
				}
			}
		}
		if step%200 == 0 {
			checkInvariants(t, ix)
		}
	}
}

// Recording and looking up with capacities allocates nothing in steady
// state.
func TestCapacityAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under the race detector")
	}
	ix := newIndex(t, Config{MaxEntries: 1 << 14, Shards: 16})
	a, b := intern(t, ix, "a"), intern(t, ix, "b")
	ix.SetCapacity(a, 1024)
	next := uint64(1)
	hs := make([]Hash, 64)
	ids, depths := []ID{a, b}, make([]int, 2)
	step := func() {
		for k := range hs {
			next++
			hs[k] = Hash(next * 0x9e3779b97f4a7c15)
		}
		ix.Depths(Scope{}, hs, ids, depths)
		ix.Record(Scope{}, hs, a)
	}
	for range 300 { // past the index's growth
		step()
	}
	if n := testing.AllocsPerRun(200, step); n != 0 {
		t.Errorf("Depths and Record with a capacity: %v allocations, want 0", n)
	}
	checkInvariants(t, ix)
}

// BenchmarkCapacity is what capacities cost a request's index work
// (Depths over 8 candidates, then Record of new prompts), against the
// same index without them.
func BenchmarkCapacity(b *testing.B) {
	for _, capped := range []bool{false, true} {
		name := "none"
		if capped {
			name = "every-upstream"
		}
		b.Run(name, func(b *testing.B) {
			ix := newIndex(b, Config{MaxEntries: 1 << 18})
			var ids []ID
			for i := range 8 {
				ids = append(ids, intern(b, ix, fmt.Sprint("10.0.0.", i, ":8000")))
				if capped {
					ix.SetCapacity(ids[i], 1<<14)
				}
			}
			hs := make([]Hash, 128)
			depths := make([]int, len(ids))
			next := uint64(1 << 40)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				for k := range hs {
					next++
					hs[k] = Hash(next * 0x9e3779b97f4a7c15)
				}
				ix.Depths(Scope{}, hs, ids, depths)
				ix.Record(Scope{}, hs, ids[i%len(ids)])
				i++
			}
		})
	}
}

// Age is the chunks sent to an upstream since it was last sent a prefix.
func TestCapacityAge(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 4096, Shards: 4})
	a, b := intern(t, ix, "a"), intern(t, ix, "b")
	tenant := ix.Scope(99, 0.5)
	if _, ok := ix.Age(Scope{}, hashes("x", 1)[0], a); ok {
		t.Error("Age without any capacity reports an age")
	}
	ix.SetCapacity(a, 1000)
	first := hashes("first", 10)
	ix.Record(tenant, first, a)
	ix.Record(tenant, hashes("then", 25), a)
	if age, ok := ix.Age(tenant, first[9], a); !ok || age != 35 {
		t.Errorf("Age of the first prompt's last chunk = %d, %v; want 35 (its 10 chunks and 25 since), true", age, ok)
	}
	if _, ok := ix.Age(tenant, first[9], b); ok {
		t.Error("Age reports an age for an upstream that does not own the prefix")
	}
	// An upstream without a capacity is aged too, once the clocks run.
	ix.Record(tenant, first, b)
	ix.Record(tenant, hashes("b-then", 7), b)
	if age, ok := ix.Age(tenant, first[9], b); !ok || age != 17 {
		t.Errorf("Age at b, which has no capacity = %d, %v; want 17 (its 10 chunks and 7 since), true", age, ok)
	}
	if _, ok := ix.Age(Scope{}, hashes("nothing", 1)[0], a); ok {
		t.Error("Age reports an age for a prefix no one owns")
	}
}
