package caddymodule

import (
	"slices"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

func newTestIndex(t *testing.T) *prefixindex.Index {
	t.Helper()
	ix, err := prefixindex.New(prefixindex.Config{MaxEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// checkTable checks that tab holds, for each upstream of pool in order,
// what Select would derive itself: Intern(Dial) and xxh3 of Dial.
func checkTable(t *testing.T, ix *prefixindex.Index, pool reverseproxy.UpstreamPool, tab *upstreamTable) {
	t.Helper()
	if len(tab.ids) != len(pool) || len(tab.keys) != len(pool) {
		t.Fatalf("table has %d IDs and %d keys for %d upstreams", len(tab.ids), len(tab.keys), len(pool))
	}
	for i, u := range pool {
		id, err := ix.Intern(u.Dial)
		if err != nil {
			t.Fatal(err)
		}
		if tab.ids[i] != id {
			t.Errorf("table ID of %s = %d, want Intern(%q) = %d", u.Dial, tab.ids[i], u.Dial, id)
		}
		if want := xxh3.HashString(u.Dial); tab.keys[i] != want {
			t.Errorf("table key of %s = %#x, want xxh3.HashString(%q) = %#x", u.Dial, tab.keys[i], u.Dial, want)
		}
	}
}

func TestUpstreamCacheTable(t *testing.T) {
	ix := newTestIndex(t)
	pool := benchPool(5)
	var c upstreamCache

	tab := c.table(ix, pool)
	checkTable(t, ix, pool, tab)
	if again := c.table(ix, pool); again != tab {
		t.Errorf("table(same pool) built a new table")
	}

	// Dynamic upstreams: new Upstream values with the same Dials.
	fresh := make(reverseproxy.UpstreamPool, len(pool))
	for i, u := range pool {
		fresh[i] = &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: u.Dial}
	}
	if again := c.table(ix, fresh); again != tab {
		t.Errorf("table(new Upstreams with the same Dials) built a new table")
	}

	tests := []struct {
		name string
		pool reverseproxy.UpstreamPool
	}{
		{"reordered", append(reverseproxy.UpstreamPool{pool[4]}, pool[:4]...)},
		{"one removed", pool[1:]},
		{"one added", append(slices.Clone(pool), benchPool(6)[5])},
		{"one replaced", append(slices.Clone(pool[:4]), &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: "10.9.9.9:8000"})},
		{"empty", reverseproxy.UpstreamPool{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := c.table(ix, tt.pool)
			checkTable(t, ix, tt.pool, tab)
			if again := c.table(ix, tt.pool); again != tab {
				t.Errorf("table(same pool) built a new table")
			}
		})
	}

	t.Run("other index", func(t *testing.T) {
		other := newTestIndex(t)
		other.Intern("first") // so that IDs differ from ix's
		tab := c.table(other, pool)
		if tab.ix != other {
			t.Fatalf("table(other index) returned the table of another index")
		}
		checkTable(t, other, pool, tab)
	})
}

func TestUpstreamCacheForget(t *testing.T) {
	ix := newTestIndex(t)
	pool := benchPool(4)
	var c upstreamCache
	before := c.table(ix, pool)

	ix.Forget(pool[2].Dial)
	c.invalidate()
	tab := c.table(ix, pool)
	checkTable(t, ix, pool, tab)
	if tab.ids[2] == before.ids[2] {
		t.Errorf("after Forget and invalidate, ID of %s is still %d", pool[2].Dial, tab.ids[2])
	}

	// Without invalidate, the random re-intern notices within a few
	// calls: the chance of missing it 200 times in a row is (3/4)^200.
	ix.Forget(pool[1].Dial)
	for range 200 {
		if tab = c.table(ix, pool); tab.ids[1] != before.ids[1] && tab.ids[1] != 0 {
			break
		}
	}
	checkTable(t, ix, pool, tab)
}

func TestUpstreamCacheUninterned(t *testing.T) {
	// An upstream that could not be interned (all IDs in use) has ID 0 in
	// the table, and the table is kept while the pool is the same.
	ix := newTestIndex(t)
	pool := benchPool(1)
	var c upstreamCache
	tab := &upstreamTable{ix: ix, dials: []string{pool[0].Dial}, ids: []prefixindex.ID{0}, keys: []uint64{xxh3.HashString(pool[0].Dial)}}
	c.cur.Store(tab)
	if got := c.table(ix, pool); got != tab {
		t.Errorf("table(same pool) rebuilt a table whose only upstream has no ID")
	}
}

func TestUpstreamCacheDoesNotAllocate(t *testing.T) {
	ix := newTestIndex(t)
	pool := benchPool(16)
	var c upstreamCache
	c.table(ix, pool)
	if n := testing.AllocsPerRun(100, func() { c.table(ix, pool) }); n != 0 {
		t.Errorf("table(same pool) allocates %v times per call, want 0", n)
	}
}
