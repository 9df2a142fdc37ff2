package prefixindex

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// hashes returns n distinct hashes for prompt family tag. Equal tags give
// equal hashes, so hashes("a", 8)[:5] is the prefix of hashes("a", 8).
func hashes(tag string, n int) []Hash {
	hs := make([]Hash, n)
	for i := range hs {
		hs[i] = Hash(xxh3.HashStringSeed(tag, uint64(i)+1))
	}
	return hs
}

func newIndex(t testing.TB, cfg Config) *Index {
	t.Helper()
	ix, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v) error: %v", cfg, err)
	}
	return ix
}

func intern(t testing.TB, ix *Index, name string) ID {
	t.Helper()
	id, err := ix.Intern(name)
	if err != nil {
		t.Fatalf("Intern(%q) error: %v", name, err)
	}
	return id
}

func depthsOf(ix *Index, hs []Hash, ids ...ID) []int {
	d := make([]int, len(ids))
	ix.Depths(Scope{}, hs, ids, d)
	return d
}

// checkInvariants verifies every shard's structure: the LRU list, the slot
// table, the free list, the owner lists and the bounds.
func checkInvariants(t testing.TB, ix *Index) {
	t.Helper()
	total := 0
	for si := range ix.shards {
		s := &ix.shards[si]
		s.mu.Lock()
		err := s.check(ix, uint64(si))
		total += s.limit
		s.mu.Unlock()
		if err != nil {
			t.Fatalf("shard %d: %v", si, err)
		}
	}
	if total != ix.capacity {
		t.Fatalf("shard limits sum to %d, want capacity %d", total, ix.capacity)
	}
}

func (s *shard) check(ix *Index, si uint64) error {
	if s.n > s.limit || len(s.entries) > s.limit+sentinels || len(s.slots) > s.maxSlots || 4*s.n > 3*len(s.slots) && s.n > 0 {
		return fmt.Errorf("bounds: n %d limit %d len(entries) %d slots %d maxSlots %d", s.n, s.limit, len(s.entries), len(s.slots), s.maxSlots)
	}
	if s.entries == nil {
		if s.n != 0 || s.nProb != 0 || s.free != 0 {
			return fmt.Errorf("empty shard with n %d nProb %d free %d", s.n, s.nProb, s.free)
		}
		return nil
	}
	for _, list := range []struct {
		head uint32
		flag uint32
		want int
	}{{protHead, 0, s.n - s.nProb}, {probHead, probBit, s.nProb}} {
		n := 0
		h := s.entries[list.head]
		if h.next&probBit != list.flag {
			return fmt.Errorf("sentinel %d: flag %#x, want %#x", list.head, h.next&probBit, list.flag)
		}
		for prev, idx := list.head, h.next&^probBit; idx != list.head; prev, idx = idx, s.entries[idx].next&^probBit {
			e := s.entries[idx]
			if e.prev != prev {
				return fmt.Errorf("entry %d: prev %d, want %d", idx, e.prev, prev)
			}
			if e.next&probBit != list.flag {
				return fmt.Errorf("entry %d on list %d has flag %#x", idx, list.head, e.next&probBit)
			}
			if e.owners == 0 {
				return fmt.Errorf("entry %d in LRU list has no owner", idx)
			}
			seen := map[uint16]bool{}
			for p := 0; p < MaxOwners; p++ {
				id := uint16(e.owners >> (16 * p))
				if id == 0 {
					if e.owners>>(16*p) != 0 {
						return fmt.Errorf("entry %d: owners %#x has a gap", idx, e.owners)
					}
					break
				}
				if seen[id] {
					return fmt.Errorf("entry %d: owners %#x repeats %d", idx, e.owners, id)
				}
				seen[id] = true
			}
			// (Which shard a key lives in depends on the Scope it was
			// recorded in, so only the slot table is checked here.)
			if got := s.lookup(mix(e.key, ix.secret), e.key); got != idx {
				return fmt.Errorf("lookup(key of entry %d) = %d", idx, got)
			}
			if n++; n > s.n {
				return fmt.Errorf("LRU list %d longer than n %d", list.head, s.n)
			}
		}
		if n != list.want {
			return fmt.Errorf("LRU list %d has %d entries, want %d (n %d, nProb %d)", list.head, n, list.want, s.n, s.nProb)
		}
	}
	if s.n-s.nProb > s.protLimit {
		return fmt.Errorf("%d protected entries, more than protLimit %d", s.n-s.nProb, s.protLimit)
	}
	if s.stamps != nil && len(s.stamps) != len(s.entries) && len(s.entries) > 0 {
		return fmt.Errorf("%d stamps for %d entries", len(s.stamps), len(s.entries))
	}
	if s.stamps != nil {
		for idx := sentinels; idx < len(s.entries); idx++ {
			n := 0
			for o := s.entries[idx].owners; o != 0; o >>= 16 {
				n++
			}
			for p := n; p < MaxOwners; p++ {
				if s.stamps[idx][p] != 0 && s.entries[idx].owners != 0 {
					return fmt.Errorf("entry %d: stamp %d in lane %d, which has no owner (owners %#x)", idx, s.stamps[idx][p], p, s.entries[idx].owners)
				}
			}
		}
	}
	occupied := 0
	for _, v := range s.slots {
		if v != 0 {
			occupied++
			if idx := uint32(v); s.entries[idx].owners == 0 || mix(s.entries[idx].key, ix.secret)&tagMask != v&tagMask {
				return fmt.Errorf("slot %#x: stale or mistagged", v)
			}
		}
	}
	if occupied != s.n {
		return fmt.Errorf("%d occupied slots, n = %d", occupied, s.n)
	}
	free := 0
	for idx := s.free; idx != 0; idx = s.entries[idx].next {
		if s.entries[idx].owners != 0 {
			return fmt.Errorf("free entry %d has owners", idx)
		}
		if free++; free > len(s.entries) {
			return fmt.Errorf("free list cycles")
		}
	}
	if sentinels+s.n+free != len(s.entries) {
		return fmt.Errorf("sentinels + n %d + free %d != len(entries) %d", s.n, free, len(s.entries))
	}
	return nil
}

func TestNew(t *testing.T) {
	tests := []struct {
		name         string
		cfg          Config
		wantErr      string
		wantCapacity int
		wantShards   int
	}{
		{"defaults", Config{}, "", DefaultMaxEntries, DefaultShards},
		{"explicit", Config{MaxEntries: 1000, Shards: 4}, "", 1000, 4},
		{"one shard", Config{MaxEntries: 7, Shards: 1}, "", 7, 1},
		{"fewer entries than shards", Config{MaxEntries: 10, Shards: 64}, "", 10, 8},
		{"one entry", Config{MaxEntries: 1, Shards: 16}, "", 1, 1},
		{"negative entries", Config{MaxEntries: -1}, "MaxEntries must not be negative, got -1", 0, 0},
		{"shards not power of two", Config{Shards: 3}, "Shards must be a power of two between 1 and 65536, got 3", 0, 0},
		{"negative shards", Config{Shards: -4}, "Shards must be a power of two", 0, 0},
		{"too many shards", Config{Shards: MaxShards * 2}, "Shards must be a power of two", 0, 0},
		{"shard too large", Config{MaxEntries: maxShardEntries, Shards: 1}, "MaxEntries must be below", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, err := New(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New(%+v) error = %v, want %q", tt.cfg, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%+v) error = %v, want nil", tt.cfg, err)
			}
			if got := ix.Stats().Capacity; got != tt.wantCapacity {
				t.Errorf("New(%+v).Stats().Capacity = %d, want %d", tt.cfg, got, tt.wantCapacity)
			}
			if got := len(ix.shards); got != tt.wantShards {
				t.Errorf("New(%+v) has %d shards, want %d", tt.cfg, got, tt.wantShards)
			}
			checkInvariants(t, ix)
		})
	}
}

func TestIntern(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 100})
	a, b := intern(t, ix, "10.0.0.1:8000"), intern(t, ix, "10.0.0.2:8000")
	if a == 0 || b == 0 || a == b {
		t.Fatalf("Intern(a), Intern(b) = %d, %d, want distinct non-zero IDs", a, b)
	}
	if got := intern(t, ix, "10.0.0.1:8000"); got != a {
		t.Errorf("Intern(a) again = %d, want %d", got, a)
	}
	if got := ix.Stats().Upstreams; got != 2 {
		t.Errorf("Stats().Upstreams = %d, want 2", got)
	}

	ix.maxIDs = 3
	c := intern(t, ix, "c")
	if _, err := ix.Intern("d"); err == nil {
		t.Errorf("Intern(d) with all %d IDs in use: error nil, want error", ix.maxIDs)
	}
	ix.Forget("10.0.0.2:8000")
	if got := intern(t, ix, "d"); got != b {
		t.Errorf("Intern(d) after Forget(b) = %d, want reused ID %d", got, b)
	}
	ix.Forget("never interned") // no-op
	if got := intern(t, ix, "c"); got != c {
		t.Errorf("Intern(c) = %d, want %d", got, c)
	}
}

// TestInternRoundRobin checks that a forgotten ID is reused only after every
// other free ID.
func TestInternRoundRobin(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 100})
	ix.maxIDs = 5
	for _, n := range []string{"a", "b", "c"} {
		intern(t, ix, n)
	}
	ix.Forget("a") // ID 1 free, but 4 and 5 never used
	var got []ID
	for _, n := range []string{"d", "e", "f"} {
		got = append(got, intern(t, ix, n))
	}
	if want := []ID{4, 5, 1}; !slices.Equal(got, want) {
		t.Errorf("Intern(d, e, f) after Forget(a) = %v, want %v", got, want)
	}
}

func TestDepths(t *testing.T) {
	h := hashes("p", 8)
	other := hashes("q", 8)
	type rec struct {
		hs    []Hash
		owner string
	}
	tests := []struct {
		name    string
		records []rec
		query   []Hash
		ids     []string
		want    []int
	}{
		{"holds 0..4 not 5", []rec{{h[:5], "A"}}, h, []string{"A"}, []int{5}},
		{"holds all", []rec{{h, "A"}}, h, []string{"A"}, []int{8}},
		{"query shorter than holding", []rec{{h, "A"}}, h[:3], []string{"A"}, []int{3}},
		// Hashes are chained: owning chunk k means having been sent the
		// whole prefix through it, whatever became of the shallower entries.
		{"missing chunk 0", []rec{{h[1:6], "A"}}, h, []string{"A"}, []int{6}},
		{"holds only chunk 3", []rec{{h[3:4], "A"}}, h, []string{"A"}, []int{4}},
		{"gap at 3", []rec{{h[:3], "A"}, {h[4:], "A"}}, h, []string{"A"}, []int{8}},
		{"dropped off a hot chunk 0", []rec{{h, "A"}, {h[:1], "B"}, {h[:1], "C"}, {h[:1], "D"}, {h[:1], "E"}}, h, []string{"A", "B", "E", "F"}, []int{8, 1, 1, 0}},
		{"other prompt", []rec{{other, "A"}}, h, []string{"A"}, []int{0}},
		{"replicated", []rec{{h[:6], "A"}, {h[:3], "B"}}, h, []string{"A", "B", "C"}, []int{6, 3, 0}},
		{"shared prefix then diverge", []rec{{append(h[:2:2], other[2:]...), "A"}, {h, "B"}}, h, []string{"A", "B"}, []int{2, 8}},
		{"duplicate ids", []rec{{h[:4], "A"}}, h, []string{"A", "B", "A"}, []int{4, 0, 4}},
		{"empty query", []rec{{h, "A"}}, nil, []string{"A"}, []int{0}},
		{"no ids", []rec{{h, "A"}}, h, nil, []int{}},
		{"single chunk", []rec{{h[:1], "A"}}, h[:1], []string{"A", "B"}, []int{1, 0}},
	}
	for _, shards := range []int{1, 16} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/shards=%d", tt.name, shards), func(t *testing.T) {
				ix := newIndex(t, Config{MaxEntries: 1000, Shards: shards})
				for _, r := range tt.records {
					ix.Record(Scope{}, r.hs, intern(t, ix, r.owner))
				}
				ids := make([]ID, len(tt.ids))
				for j, n := range tt.ids {
					ids[j] = intern(t, ix, n)
				}
				got := make([]int, len(ids)+1)
				got[len(ids)] = -1 // beyond len(ids): untouched
				ix.Depths(Scope{}, tt.query, ids, got)
				if !slices.Equal(got[:len(ids)], tt.want) || got[len(ids)] != -1 {
					t.Errorf("Depths(query[%d], %v) = %v, want %v", len(tt.query), tt.ids, got, append(slices.Clone(tt.want), -1))
				}
				checkInvariants(t, ix)
			})
		}
	}
}

func TestDepthsZeroAndUnknownID(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 100})
	h := hashes("p", 4)
	ix.Record(Scope{}, h, intern(t, ix, "A"))
	ix.Record(Scope{}, h, 0)    // no upstream: ignored
	ix.Record(Scope{}, h, 4242) // never interned: ignored
	if got, want := depthsOf(ix, h, 0, 4242), []int{0, 0}; !slices.Equal(got, want) {
		t.Errorf("Depths(h, [0 4242]) = %v, want %v", got, want)
	}
	if got := ix.Stats().Entries; got != 4 {
		t.Errorf("Stats().Entries = %d, want 4", got)
	}
}

func TestMaxOwners(t *testing.T) {
	h := hashes("p", 3)
	tests := []struct {
		name  string
		order []string // record h for these owners, in order
		want  map[string]int
	}{
		{"four fit", []string{"A", "B", "C", "D"}, map[string]int{"A": 3, "B": 3, "C": 3, "D": 3}},
		{"fifth evicts least recent", []string{"A", "B", "C", "D", "E"}, map[string]int{"A": 0, "B": 3, "C": 3, "D": 3, "E": 3}},
		{"refresh keeps owner", []string{"A", "B", "C", "D", "A", "E"}, map[string]int{"A": 3, "B": 0, "C": 3, "D": 3, "E": 3}},
		{"repeat owner takes one place", []string{"A", "A", "A", "B", "C", "D"}, map[string]int{"A": 3, "B": 3, "C": 3, "D": 3}},
		{"six owners", []string{"A", "B", "C", "D", "E", "F"}, map[string]int{"A": 0, "B": 0, "C": 3, "D": 3, "E": 3, "F": 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := newIndex(t, Config{MaxEntries: 100, Shards: 4})
			for _, o := range tt.order {
				ix.Record(Scope{}, h, intern(t, ix, o))
			}
			for name, want := range tt.want {
				if got := depthsOf(ix, h, intern(t, ix, name))[0]; got != want {
					t.Errorf("after recording %v: Depths(h, %s) = %d, want %d", tt.order, name, got, want)
				}
			}
			checkInvariants(t, ix)
		})
	}
}

func TestOwnerLanes(t *testing.T) {
	tests := []struct {
		name string
		o    uint64
		push uint16
		want uint64
	}{
		{"empty", 0, 5, 0x0005},
		{"front", 0x0002_0001, 3, 0x0002_0001_0003},
		{"already front", 0x0002_0001, 1, 0x0002_0001},
		{"move to front", 0x0003_0002_0001, 3, 0x0002_0001_0003},
		{"full drops last", 0x0004_0003_0002_0001, 5, 0x0003_0002_0001_0005},
		{"full move from back", 0x0004_0003_0002_0001, 4, 0x0003_0002_0001_0004},
		{"high ID", 0x0001, 0xffff, 0x0001_ffff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pushOwner(tt.o, tt.push); got != tt.want {
				t.Errorf("pushOwner(%#x, %d) = %#x, want %#x", tt.o, tt.push, got, tt.want)
			}
			for id := 1; id < 1<<16; id += 257 {
				want := false
				for p := 0; p < 64; p += 16 {
					want = want || uint16(tt.o>>p) == uint16(id)
				}
				if got := holds(tt.o, ID(id)); got != want {
					t.Fatalf("holds(%#x, %d) = %v, want %v", tt.o, id, got, want)
				}
			}
		})
	}
}

// TestLRU checks eviction order in one shard, where it is exact.
func TestLRU(t *testing.T) {
	h := hashes("k", 8)
	tests := []struct {
		name    string
		max     int
		records [][]Hash
		depths  bool // look up h[2] (Depths) after the first records
		present []int
		absent  []int
	}{
		{"oldest evicted", 3, [][]Hash{h[0:1], h[1:2], h[2:3], h[3:4]}, false, []int{1, 2, 3}, []int{0}},
		{"refresh protects", 3, [][]Hash{h[0:1], h[1:2], h[2:3], h[0:1], h[3:4]}, false, []int{0, 2, 3}, []int{1}},
		{"Depths does not refresh", 3, [][]Hash{h[2:3], h[0:1], h[1:2], h[3:4]}, true, []int{0, 1, 3}, []int{2}},
		{"deepest of a request evicted first", 3, [][]Hash{h[0:3], h[3:4]}, false, []int{0, 1, 3}, []int{2}},
		{"whole request larger than bound keeps its shallowest", 3, [][]Hash{h[0:6]}, false, []int{0, 1, 2}, []int{3, 4, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := newIndex(t, Config{MaxEntries: tt.max, Shards: 1})
			a := intern(t, ix, "A")
			for i, r := range tt.records {
				if tt.depths && i == len(tt.records)-1 {
					depthsOf(ix, h[2:3], a)
				}
				ix.Record(Scope{}, r, a)
			}
			for _, i := range tt.present {
				if got := depthsOf(ix, h[i:i+1], a)[0]; got != 1 {
					t.Errorf("Depths(h[%d]) = %d, want 1 (present)", i, got)
				}
			}
			for _, i := range tt.absent {
				if got := depthsOf(ix, h[i:i+1], a)[0]; got != 0 {
					t.Errorf("Depths(h[%d]) = %d, want 0 (evicted)", i, got)
				}
			}
			st := ix.Stats()
			if st.Entries != tt.max {
				t.Errorf("Stats().Entries = %d, want %d", st.Entries, tt.max)
			}
			if want := uint64(len(tt.absent)); st.Evictions != want {
				t.Errorf("Stats().Evictions = %d, want %d", st.Evictions, want)
			}
			checkInvariants(t, ix)
		})
	}
}

func TestForget(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 1000, Shards: 4})
	ix.maxIDs = 3
	shared, onlyA := hashes("shared", 10), hashes("onlyA", 10)
	a, b := intern(t, ix, "A"), intern(t, ix, "B")
	ix.Record(Scope{}, shared, a)
	ix.Record(Scope{}, shared, b)
	ix.Record(Scope{}, onlyA, a)
	if got := ix.Stats().Entries; got != 20 {
		t.Fatalf("Stats().Entries = %d, want 20", got)
	}

	ix.Forget("A")
	if got := ix.Stats().Entries; got != 10 {
		t.Errorf("after Forget(A): Stats().Entries = %d, want 10 (A's own entries freed)", got)
	}
	if got := depthsOf(ix, shared, a, b); !slices.Equal(got, []int{0, 10}) {
		t.Errorf("after Forget(A): Depths(shared, [A B]) = %v, want [0 10]", got)
	}
	ix.Record(Scope{}, onlyA, a) // stale ID: ignored
	if got := ix.Stats().Entries; got != 10 {
		t.Errorf("Record with forgotten ID: Stats().Entries = %d, want 10", got)
	}
	checkInvariants(t, ix)

	// Use up the IDs so that A's is reused: the new owner inherits nothing.
	intern(t, ix, "C")
	d := intern(t, ix, "D")
	if d != a {
		t.Fatalf("Intern(D) = %d, want reused ID %d", d, a)
	}
	if got := depthsOf(ix, onlyA, d)[0]; got != 0 {
		t.Errorf("Depths(onlyA, D) with D reusing A's ID = %d, want 0", got)
	}
	if got := depthsOf(ix, shared, d)[0]; got != 0 {
		t.Errorf("Depths(shared, D) with D reusing A's ID = %d, want 0", got)
	}
	// A comes back with a fresh ID and no ownership.
	ix.Forget("C")
	a2 := intern(t, ix, "A")
	if got := depthsOf(ix, shared, a2)[0]; got != 0 {
		t.Errorf("Depths(shared, A re-interned) = %d, want 0", got)
	}
	checkInvariants(t, ix)
}

func TestFlush(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 10000, Shards: 8})
	empty := ix.Stats()
	a := intern(t, ix, "A")
	h := hashes("p", 500)
	ix.Record(Scope{}, h, a)
	if got := ix.Stats(); got.Entries != 500 || got.Bytes <= empty.Bytes {
		t.Fatalf("after Record: Stats() = %+v, want 500 entries and more than %d bytes", got, empty.Bytes)
	}
	ix.Flush()
	got := ix.Stats()
	if got.Entries != 0 || got.Bytes != empty.Bytes+int64(len("A"))+nameOverhead {
		t.Errorf("after Flush: Stats() = %+v, want 0 entries and %d bytes", got, empty.Bytes+int64(len("A"))+nameOverhead)
	}
	if d := depthsOf(ix, h, a)[0]; d != 0 {
		t.Errorf("after Flush: Depths(h, A) = %d, want 0", d)
	}
	if id := intern(t, ix, "A"); id != a {
		t.Errorf("after Flush: Intern(A) = %d, want %d (names kept)", id, a)
	}
	ix.Record(Scope{}, h, a)
	if d := depthsOf(ix, h, a)[0]; d != 500 {
		t.Errorf("after Flush and Record: Depths(h, A) = %d, want 500", d)
	}
	checkInvariants(t, ix)
}

// model is a straightforward reference: per shard a map of entries, each
// with its last use, its list (protected or probation) and its owners as a
// slice; eviction and demotion scan for the least recently used.
type model struct {
	ix     *Index
	shards []map[Hash]*mentry
	clock  int
}

type mentry struct {
	owners []ID
	used   int
	prot   bool
}

func newModel(ix *Index) *model {
	m := &model{ix: ix, shards: make([]map[Hash]*mentry, len(ix.shards))}
	for i := range m.shards {
		m.shards[i] = map[Hash]*mentry{}
	}
	return m
}

// shard is where h lives in scope, computed independently of group.
func (m *model) shard(sc Scope, h Hash) int {
	mixed := mix(uint64(h), m.ix.secret)
	if sc.n == 0 {
		return int(mixed & m.ix.shardMask)
	}
	off := uint64(uint32(mixed)) * uint64(sc.n) >> 32
	return int((uint64(sc.first) + off) % uint64(len(m.ix.shards)))
}

// oldest returns the least recently used entry of shard s on the list
// prot, and whether there is one.
func oldest(s map[Hash]*mentry, prot bool) (Hash, bool) {
	var (
		key   Hash
		found bool
	)
	for k, v := range s {
		if v.prot == prot && (!found || v.used < s[key].used) {
			key, found = k, true
		}
	}
	return key, found
}

func (m *model) update(sc Scope, hs []Hash, owner ID, confirm bool) {
	for i := len(hs) - 1; i >= 0; i-- { // deepest first; every shard sees the same relative order
		h := hs[i]
		si := m.shard(sc, h)
		s, real := m.shards[si], &m.ix.shards[si]
		m.clock++
		e, ok := s[h]
		if !ok {
			if len(s) == real.limit {
				victim, found := oldest(s, false)
				if !found {
					victim, _ = oldest(s, true)
				}
				delete(s, victim)
			}
			e = &mentry{}
			s[h] = e
		}
		e.used = m.clock
		if confirm && real.protLimit > 0 {
			e.prot = true
		}
		e.owners = slices.DeleteFunc(e.owners, func(id ID) bool { return id == owner })
		e.owners = append([]ID{owner}, e.owners...)
		if len(e.owners) > MaxOwners {
			e.owners = e.owners[:MaxOwners]
		}
		prot := 0
		for _, v := range s {
			if v.prot {
				prot++
			}
		}
		if prot > real.protLimit {
			k, _ := oldest(s, true)
			m.clock++
			s[k].prot, s[k].used = false, m.clock
		}
	}
}

func (m *model) forget(id ID) {
	for _, s := range m.shards {
		for h, e := range s {
			e.owners = slices.DeleteFunc(e.owners, func(o ID) bool { return o == id })
			if len(e.owners) == 0 {
				delete(s, h)
			}
		}
	}
}

func (m *model) depth(sc Scope, hs []Hash, id ID) int {
	for i := len(hs) - 1; i >= 0; i-- {
		if e, ok := m.shards[m.shard(sc, hs[i])][hs[i]]; ok && slices.Contains(e.owners, id) {
			return i + 1
		}
	}
	return 0
}

func (m *model) entries() int {
	n := 0
	for _, s := range m.shards {
		n += len(s)
	}
	return n
}

// TestModel runs random operations (records, confirmations, lookups,
// forgets, in the whole index and in tenants' scopes) against the index
// and the reference model and compares every answer.
func TestModel(t *testing.T) {
	for _, cfg := range []Config{
		{MaxEntries: 50, Shards: 1},
		{MaxEntries: 203, Shards: 4},
		{MaxEntries: 5000, Shards: 16},
		{MaxEntries: 300, Shards: 8, Probation: 0.5},
		{MaxEntries: 64, Shards: 2, Probation: 1},
	} {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(cfg.MaxEntries)))
			ix := newIndex(t, cfg)
			m := newModel(ix)
			names := []string{"a", "b", "c", "d", "e", "f"}
			type family struct {
				hs    []Hash
				scope Scope
			}
			families := make([]family, 20)
			for i := range families {
				families[i].hs = hashes(fmt.Sprint("fam", i), 64)
				if i%2 == 1 { // every other family is a tenant's
					families[i].scope = ix.Scope(uint64(i)*0x9e3779b97f4a7c15, 0.25)
				}
			}
			for step := range 4000 {
				fam := families[r.IntN(len(families))]
				hs := fam.hs[:r.IntN(len(fam.hs)+1)]
				switch op := r.IntN(100); {
				case op < 2:
					n := names[r.IntN(len(names))]
					if id, ok := (*ix.ids.Load())[n]; ok {
						ix.Forget(n)
						m.forget(id)
					}
				case op < 35:
					id := intern(t, ix, names[r.IntN(len(names))])
					ix.Record(fam.scope, hs, id)
					m.update(fam.scope, hs, id, false)
				case op < 50:
					id := intern(t, ix, names[r.IntN(len(names))])
					ix.Confirm(fam.scope, hs, id)
					m.update(fam.scope, hs, id, true)
				default:
					ids := make([]ID, 3)
					for j := range ids {
						ids[j] = intern(t, ix, names[r.IntN(len(names))])
					}
					got := make([]int, len(ids))
					ix.Depths(fam.scope, hs, ids, got)
					for j, id := range ids {
						if want := m.depth(fam.scope, hs, id); got[j] != want {
							t.Fatalf("step %d: Depths(hs[%d], %v)[%d] = %d, want %d", step, len(hs), ids, j, got[j], want)
						}
					}
				}
				if got, want := ix.Stats().Entries, m.entries(); got != want {
					t.Fatalf("step %d: Stats().Entries = %d, want %d", step, got, want)
				}
				if step%100 == 0 {
					checkInvariants(t, ix)
				}
			}
			checkInvariants(t, ix)
		})
	}
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under the race detector")
	}
	ix := newIndex(t, Config{MaxEntries: 4096, Shards: 16})
	a, b := intern(t, ix, "10.0.0.1:8000"), intern(t, ix, "10.0.0.2:8000")
	warm := hashes("warm", 512)
	ix.Record(Scope{}, warm, a)
	ids := []ID{a, b}
	depths := make([]int, len(ids))
	fresh := hashes("fresh", 1<<16)
	tenant := ix.Scope(0x1234567, 0.25)
	i := 0
	tests := []struct {
		name string
		fn   func()
	}{
		{"Intern known", func() { _, _ = ix.Intern("10.0.0.1:8000") }},
		{"Depths warm", func() { ix.Depths(Scope{}, warm, ids, depths) }},
		{"Depths cold", func() { ix.Depths(Scope{}, fresh[:512], ids, depths) }},
		{"Record refresh", func() { ix.Record(Scope{}, warm, b) }},
		{"Record evicting", func() { ix.Record(Scope{}, fresh[i%len(fresh):][:256], a); i += 256 }},
		{"Confirm evicting", func() { ix.Confirm(Scope{}, fresh[i%len(fresh):][:256], b); i += 256 }},
		{"Depths in scope", func() { ix.Depths(tenant, warm, ids, depths) }},
		{"Record in scope", func() { ix.Record(tenant, fresh[i%len(fresh):][:256], a); i += 256 }},
		{"Scope", func() { _ = ix.Scope(uint64(i)|1, 0.25); i++ }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Reach steady state: full index, pooled scratch grown.
			for range 100 {
				tt.fn()
			}
			if got := testing.AllocsPerRun(100, tt.fn); got != 0 {
				t.Errorf("AllocsPerRun(%s) = %v, want 0", tt.name, got)
			}
		})
	}
}

// TestInternAll: a batch gets the IDs one Intern per name would give it
// (known names keep theirs, duplicates share one, new names get IDs in
// order), names past MaxIDs get 0 and an error, and the others are
// interned all the same.
func TestInternAll(t *testing.T) {
	seq := newIndex(t, Config{MaxEntries: 100})
	batch := newIndex(t, Config{MaxEntries: 100})
	names := []string{"a", "b", "a", "c", "d"}
	intern(t, seq, "b")
	intern(t, batch, "b")
	var want []ID
	for _, n := range names {
		want = append(want, intern(t, seq, n))
	}
	got, err := batch.InternAll(names, nil)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("InternAll(%q) = %v, %v; want %v (Intern one by one), nil", names, got, err, want)
	}
	for i, n := range names {
		if id := intern(t, batch, n); id != got[i] {
			t.Errorf("Intern(%q) after InternAll = %d, want %d", n, id, got[i])
		}
		if !batch.isLive(got[i]) {
			t.Errorf("ID %d of %q not live after InternAll", got[i], n)
		}
	}
	if s := batch.Stats().Upstreams; s != 4 {
		t.Errorf("Stats().Upstreams = %d, want 4", s)
	}
	if again, err := batch.InternAll(names, got[:0]); err != nil || !slices.Equal(again, want) {
		t.Errorf("InternAll of known names = %v, %v; want %v, nil", again, err, want)
	}

	full := newIndex(t, Config{MaxEntries: 100})
	full.maxIDs = 2
	got, err = full.InternAll([]string{"x", "y", "z", "x"}, nil)
	if err == nil || got[0] == 0 || got[1] == 0 || got[2] != 0 || got[3] != got[0] {
		t.Errorf("InternAll with 2 IDs for 3 names = %v, %v; want two IDs, 0, the first again, and an error", got, err)
	}
}

// TestUnconfirmedCannotEvictConfirmed: a flood of records that are never
// confirmed (requests the engines reject) evicts only other unconfirmed
// entries; what was confirmed stays, while an unconfirmed prefix of the
// same size, the control, is flooded out.
func TestUnconfirmedCannotEvictConfirmed(t *testing.T) {
	for _, probation := range []float64{0, 0.1, 0.5} {
		t.Run(fmt.Sprint(probation), func(t *testing.T) {
			ix := newIndex(t, Config{MaxEntries: 4096, Shards: 4, Probation: probation})
			a, b := intern(t, ix, "a"), intern(t, ix, "b")
			// Within the protected share of every shard (2048 of 4096
			// entries with probation 0.5, spread over 4 shards).
			confirmed := hashes("confirmed", 1000)
			control := hashes("control", 200)
			ix.Confirm(Scope{}, confirmed, a)
			ix.Record(Scope{}, control, a)
			flood := hashes("flood", 100_000)
			for i := 0; i < len(flood); i += 512 {
				ix.Record(Scope{}, flood[i:min(i+512, len(flood))], b)
			}
			if d := depthsOf(ix, confirmed, a)[0]; d != len(confirmed) {
				t.Errorf("after the flood: Depths(confirmed, a) = %d, want %d", d, len(confirmed))
			}
			if d := depthsOf(ix, control, a)[0]; d != 0 {
				t.Errorf("after the flood: Depths(control, a) = %d, want 0 (unconfirmed entries are flooded out)", d)
			}
			checkInvariants(t, ix)
		})
	}
}

// TestConfirmDemotes: the protected list stays within its share; the least
// recently confirmed entries beyond it go back to probation (still found),
// where unconfirmed traffic can evict them.
func TestConfirmDemotes(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 100, Shards: 1, Probation: 0.25})
	a := intern(t, ix, "a")
	old, recent := hashes("old", 50), hashes("recent", 75)
	ix.Confirm(Scope{}, old, a)
	ix.Confirm(Scope{}, recent, a)
	s := &ix.shards[0]
	if got, want := s.n-s.nProb, 75; got != want {
		t.Fatalf("protected entries = %d, want %d (the protected share)", got, want)
	}
	if d := depthsOf(ix, old, a)[0]; d != 25 {
		t.Errorf("Depths(old) = %d, want 25 (the demoted tail of old still holds)", d)
	}
	ix.Record(Scope{}, hashes("flood", 1000), a)
	if d := depthsOf(ix, recent, a)[0]; d != len(recent) {
		t.Errorf("after a flood: Depths(recent) = %d, want %d", d, len(recent))
	}
	if d := depthsOf(ix, old, a)[0]; d != 0 {
		t.Errorf("after a flood: Depths(old) = %d, want 0 (demoted entries are evictable)", d)
	}
	checkInvariants(t, ix)
}

// TestScope: a tenant's scope is ceil(share x shards) shards, the same for
// the same key, the whole index for no tenant or a share of 1, and spread
// over the shards for different keys.
func TestScope(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 1 << 12, Shards: 16})
	tests := []struct {
		key       uint64
		share     float64
		wantShare float64
	}{
		{0, 0.25, 1},
		{42, 1, 1},
		{42, 2, 1},
		{42, math.NaN(), 1},
		{42, 0.25, 0.25},
		{42, 0.2, 0.25},
		{42, 0.01, 1.0 / 16},
		{42, 0, 1.0 / 16},
		{42, 0.99, 1},
	}
	for _, tt := range tests {
		sc := ix.Scope(tt.key, tt.share)
		if got := ix.Share(sc); got != tt.wantShare {
			t.Errorf("Share(Scope(%d, %v)) = %v, want %v", tt.key, tt.share, got, tt.wantShare)
		}
		if again := ix.Scope(tt.key, tt.share); again != sc {
			t.Errorf("Scope(%d, %v) = %+v, then %+v", tt.key, tt.share, sc, again)
		}
	}
	firsts := map[uint32]bool{}
	for key := range uint64(200) {
		firsts[ix.Scope(key*0x9e3779b97f4a7c15+1, 0.25).first] = true
	}
	if len(firsts) != 16 {
		t.Errorf("200 tenants start at %d of 16 shards, want all", len(firsts))
	}
}

// TestScopeBoundsTenantDamage: a tenant confirming a flood of unique
// prompts evicts entries only in the shards of its scope; every other
// tenant's entries elsewhere survive, and the flooding tenant holds at most
// its share of the index.
func TestScopeBoundsTenantDamage(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 1 << 14, Shards: 16})
	a := intern(t, ix, "a")
	attacker := ix.Scope(7, 0.25)
	inAttacker := map[int]bool{}
	for g := range int(attacker.n) {
		inAttacker[int((uint64(attacker.first)+uint64(g))&ix.shardMask)] = true
	}
	m := newModel(ix) // for where hashes live
	type victim struct {
		scope Scope
		hs    []Hash
	}
	var victims []victim
	for key := uint64(100); key < 140; key++ {
		v := victim{ix.Scope(key*0x9e3779b97f4a7c15, 0.25), hashes(fmt.Sprint("victim", key), 16)}
		ix.Confirm(v.scope, v.hs, a)
		victims = append(victims, v)
	}
	flood := hashes("flood", 200_000)
	for i := 0; i < len(flood); i += 1024 {
		ix.Confirm(attacker, flood[i:min(i+1024, len(flood))], a)
	}
	var spared, lost int
	for _, v := range victims {
		for _, h := range v.hs {
			if inAttacker[m.shard(v.scope, h)] {
				continue // may be evicted: the shard is shared
			}
			d := make([]int, 1)
			ix.Depths(v.scope, []Hash{h}, []ID{a}, d)
			if d[0] == 1 {
				spared++
			} else {
				lost++
			}
		}
	}
	if lost != 0 || spared == 0 {
		t.Errorf("victims' entries outside the attacker's shards: %d lost, %d kept; want 0 lost", lost, spared)
	}
	held := 0
	for si := range inAttacker {
		held += ix.shards[si].n
	}
	if limit := int(ix.Share(attacker) * float64(ix.capacity)); held > limit {
		t.Errorf("the attacker's shards hold %d entries, more than its share %d", held, limit)
	}
	checkInvariants(t, ix)
}
