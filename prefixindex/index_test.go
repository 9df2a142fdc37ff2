package prefixindex

import (
	"fmt"
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
	ix.Depths(hs, ids, d)
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
	if s.n > s.limit || len(s.entries) > s.limit+1 || len(s.slots) > s.maxSlots || 4*s.n > 3*len(s.slots) && s.n > 0 {
		return fmt.Errorf("bounds: n %d limit %d len(entries) %d slots %d maxSlots %d", s.n, s.limit, len(s.entries), len(s.slots), s.maxSlots)
	}
	if s.entries == nil {
		if s.n != 0 || s.free != 0 {
			return fmt.Errorf("empty shard with n %d free %d", s.n, s.free)
		}
		return nil
	}
	count := 0
	for prev, idx := uint32(0), s.entries[0].next; idx != 0; prev, idx = idx, s.entries[idx].next {
		e := s.entries[idx]
		if e.prev != prev {
			return fmt.Errorf("entry %d: prev %d, want %d", idx, e.prev, prev)
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
		m := mix(e.key, ix.secret)
		if m&ix.shardMask != si {
			return fmt.Errorf("entry %d: key %#x belongs to shard %d", idx, e.key, m&ix.shardMask)
		}
		if got := s.lookup(m, e.key); got != idx {
			return fmt.Errorf("lookup(key of entry %d) = %d", idx, got)
		}
		if count++; count > s.n {
			return fmt.Errorf("LRU list longer than n %d", s.n)
		}
	}
	if count != s.n {
		return fmt.Errorf("LRU list has %d entries, n = %d", count, s.n)
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
	if 1+s.n+free != len(s.entries) {
		return fmt.Errorf("1 + n %d + free %d != len(entries) %d", s.n, free, len(s.entries))
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
					ix.Record(r.hs, intern(t, ix, r.owner))
				}
				ids := make([]ID, len(tt.ids))
				for j, n := range tt.ids {
					ids[j] = intern(t, ix, n)
				}
				got := make([]int, len(ids)+1)
				got[len(ids)] = -1 // beyond len(ids): untouched
				ix.Depths(tt.query, ids, got)
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
	ix.Record(h, intern(t, ix, "A"))
	ix.Record(h, 0)    // no upstream: ignored
	ix.Record(h, 4242) // never interned: ignored
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
				ix.Record(h, intern(t, ix, o))
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
				ix.Record(r, a)
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
	ix.Record(shared, a)
	ix.Record(shared, b)
	ix.Record(onlyA, a)
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
	ix.Record(onlyA, a) // stale ID: ignored
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
	ix.Record(h, a)
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
	ix.Record(h, a)
	if d := depthsOf(ix, h, a)[0]; d != 500 {
		t.Errorf("after Flush and Record: Depths(h, A) = %d, want 500", d)
	}
	checkInvariants(t, ix)
}

// model is a straightforward reference: one LRU list per shard, a map, and
// owner slices.
type model struct {
	ix     *Index
	shards []map[Hash]*mentry
	clock  int
}

type mentry struct {
	owners []ID
	used   int
}

func newModel(ix *Index) *model {
	m := &model{ix: ix, shards: make([]map[Hash]*mentry, len(ix.shards))}
	for i := range m.shards {
		m.shards[i] = map[Hash]*mentry{}
	}
	return m
}

func (m *model) shard(h Hash) int { return int(mix(uint64(h), m.ix.secret) & m.ix.shardMask) }

func (m *model) record(hs []Hash, owner ID) {
	for i := len(hs) - 1; i >= 0; i-- { // deepest first; every shard sees the same relative order
		h := hs[i]
		s := m.shards[m.shard(h)]
		m.clock++
		e, ok := s[h]
		if !ok {
			if len(s) == m.ix.shards[m.shard(h)].limit {
				var oldest Hash
				for k, v := range s {
					if _, found := s[oldest]; !found || v.used < s[oldest].used {
						oldest = k
					}
				}
				delete(s, oldest)
			}
			e = &mentry{}
			s[h] = e
		}
		e.used = m.clock
		e.owners = slices.DeleteFunc(e.owners, func(id ID) bool { return id == owner })
		e.owners = append([]ID{owner}, e.owners...)
		if len(e.owners) > MaxOwners {
			e.owners = e.owners[:MaxOwners]
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

func (m *model) depth(hs []Hash, id ID) int {
	for i := len(hs) - 1; i >= 0; i-- {
		if e, ok := m.shards[m.shard(hs[i])][hs[i]]; ok && slices.Contains(e.owners, id) {
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

// TestModel runs random operations against the index and the reference
// model and compares every answer.
func TestModel(t *testing.T) {
	for _, cfg := range []Config{{MaxEntries: 50, Shards: 1}, {MaxEntries: 203, Shards: 4}, {MaxEntries: 5000, Shards: 16}} {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(cfg.MaxEntries)))
			ix := newIndex(t, cfg)
			m := newModel(ix)
			names := []string{"a", "b", "c", "d", "e", "f"}
			families := make([][]Hash, 20)
			for i := range families {
				families[i] = hashes(fmt.Sprint("fam", i), 64)
			}
			for step := range 3000 {
				fam := families[r.IntN(len(families))]
				hs := fam[:r.IntN(len(fam)+1)]
				switch op := r.IntN(100); {
				case op < 2:
					n := names[r.IntN(len(names))]
					if id, ok := (*ix.ids.Load())[n]; ok {
						ix.Forget(n)
						m.forget(id)
					}
				case op < 50:
					id := intern(t, ix, names[r.IntN(len(names))])
					ix.Record(hs, id)
					m.record(hs, id)
				default:
					ids := make([]ID, 3)
					for j := range ids {
						ids[j] = intern(t, ix, names[r.IntN(len(names))])
					}
					got := depthsOf(ix, hs, ids...)
					for j, id := range ids {
						if want := m.depth(hs, id); got[j] != want {
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
	ix.Record(warm, a)
	ids := []ID{a, b}
	depths := make([]int, len(ids))
	fresh := hashes("fresh", 1<<16)
	i := 0
	tests := []struct {
		name string
		fn   func()
	}{
		{"Intern known", func() { _, _ = ix.Intern("10.0.0.1:8000") }},
		{"Depths warm", func() { ix.Depths(warm, ids, depths) }},
		{"Depths cold", func() { ix.Depths(fresh[:512], ids, depths) }},
		{"Record refresh", func() { ix.Record(warm, b) }},
		{"Record evicting", func() { ix.Record(fresh[i%len(fresh):][:256], a); i += 256 }},
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
