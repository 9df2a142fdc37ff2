package prefixindex

import "testing"

func TestOwned(t *testing.T) {
	ix, err := New(Config{MaxEntries: 1000, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ix.Intern("a:1")
	b, _ := ix.Intern("b:1")
	ix.Intern("c:1")
	hashes := func(start, n int) []Hash {
		var hs []Hash
		for i := range n {
			hs = append(hs, Hash(0x9e3779b97f4a7c15*uint64(start+i+1)))
		}
		return hs
	}
	ix.Record(Scope{}, hashes(0, 10), a)
	ix.Record(Scope{}, hashes(5, 10), b) // shares 5 entries with a
	got := ix.Owned()
	want := map[string]int{"a:1": 10, "b:1": 10, "c:1": 0}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("Owned()[%q] = %d, want %d (all: %v)", name, got[name], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("Owned() = %v, want exactly %v", got, want)
	}
	ix.Forget("a:1")
	if got := ix.Owned(); got["b:1"] != 10 || len(got) != 2 {
		t.Errorf("after Forget(a), Owned() = %v, want b:1=10, c:1=0", got)
	}
}

// Owned is called on every metrics scrape: what it allocates grows with
// the upstreams interned, not with the IDs an index could intern.
func TestOwnedAllocatesForInternedIDs(t *testing.T) {
	ix, err := New(Config{MaxEntries: 1000, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a:1", "b:1", "c:1", "d:1"} {
		id, _ := ix.Intern(name)
		ix.Record(Scope{}, []Hash{Hash(id) * 0x9e3779b97f4a7c15}, id)
	}
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ix.Owned()
		}
	})
	if got, limit := r.AllocedBytesPerOp(), int64(4<<10); got > limit {
		t.Errorf("Owned() with 4 upstreams allocates %d bytes per call, want at most %d", got, limit)
	}
}
