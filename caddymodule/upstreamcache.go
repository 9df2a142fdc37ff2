package caddymodule

import (
	"math/rand/v2"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// upstreamCache remembers, for the pool a policy instance was last asked
// to choose from, each upstream's interned index ID and rendezvous key.
// Both depend only on the upstream's Dial string, yet deriving them costs a
// map lookup (Index.Intern) and a hash (xxh3) per upstream per request,
// which with hundreds of upstreams is most of what Select spends outside
// the body. A pool that has the same Dials in the same order as last time
// (a static pool always does; Caddy's dynamic upstreams rebuild their
// Upstream values on every request but keep the Dial strings of their
// cached lookup) costs one string comparison per upstream, which is a
// pointer comparison when the strings share their bytes.
//
// The zero value is ready to use. It must not be copied after first use:
// hold it by pointer. It is safe for concurrent use; a change of pool
// builds a new table (the slow path, which allocates), and concurrent
// requests that see the change at once may each build one.
type upstreamCache struct {
	cur atomic.Pointer[upstreamTable]
}

// upstreamTable is a snapshot of one pool, in pool order. It is never
// modified after it is published.
type upstreamTable struct {
	ix    *prefixindex.Index
	dials []string
	// ids[i] is the ID of dials[i], 0 when it could not be interned (all
	// prefixindex.MaxIDs IDs in use): route without that upstream, as
	// Select does when Intern fails.
	ids []prefixindex.ID
	// keys[i] is the rendezvous key of dials[i]: xxh3.HashString(dials[i]),
	// the same on every Caddy instance.
	keys []uint64
}

// table returns the IDs and keys of pool's upstreams, in pool order, for
// the index ix. It does not allocate unless the pool's Dials, their order
// or the index changed since the last call.
//
// IDs stay valid until ix.Forget of their name. Whoever calls Forget
// should call invalidate too; as a backstop, each call re-interns one
// upstream chosen at random and rebuilds the table if its ID changed, so a
// stale table is noticed within about len(pool) requests even then. (A
// stale ID only makes its upstream look cold: Record ignores IDs that are
// not interned.)
func (c *upstreamCache) table(ix *prefixindex.Index, pool reverseproxy.UpstreamPool) *upstreamTable {
	if t := c.cur.Load(); t != nil && t.matches(ix, pool) {
		return t
	}
	t := newUpstreamTable(ix, pool)
	c.cur.Store(t)
	return t
}

// peek is table without side effects, for a dry run: the cached table if
// it describes pool, else one built from the IDs ix already has, with 0
// for the upstreams it has never interned. Neither interns a name.
func (c *upstreamCache) peek(ix *prefixindex.Index, pool reverseproxy.UpstreamPool) *upstreamTable {
	if t := c.cur.Load(); t != nil && t.ix == ix && len(t.dials) == len(pool) {
		same := true
		for i, u := range pool {
			if u.Dial != t.dials[i] {
				same = false
				break
			}
		}
		if same {
			return t
		}
	}
	t := &upstreamTable{
		ix:    ix,
		dials: make([]string, len(pool)),
		ids:   make([]prefixindex.ID, len(pool)),
		keys:  make([]uint64, len(pool)),
	}
	for i, u := range pool {
		t.dials[i] = u.Dial
		t.keys[i] = xxh3.HashString(u.Dial)
		t.ids[i], _ = ix.ID(u.Dial)
	}
	return t
}

// invalidate drops the cached table, so that the next call to table
// interns every upstream afresh. Call it after Index.Forget.
func (c *upstreamCache) invalidate() { c.cur.Store(nil) }

// matches reports whether t describes pool over ix and, for one upstream
// picked at random, still holds the ID ix gives its name.
func (t *upstreamTable) matches(ix *prefixindex.Index, pool reverseproxy.UpstreamPool) bool {
	if t.ix != ix || len(t.dials) != len(pool) {
		return false
	}
	for i, u := range pool {
		if u.Dial != t.dials[i] {
			return false
		}
	}
	if len(pool) == 0 {
		return true
	}
	i := rand.IntN(len(pool))
	if t.ids[i] == 0 {
		return true // could not be interned; retried when the pool changes
	}
	id, err := ix.Intern(t.dials[i])
	return err == nil && id == t.ids[i]
}

func newUpstreamTable(ix *prefixindex.Index, pool reverseproxy.UpstreamPool) *upstreamTable {
	t := &upstreamTable{
		ix:    ix,
		dials: make([]string, len(pool)),
		ids:   make([]prefixindex.ID, len(pool)),
		keys:  make([]uint64, len(pool)),
	}
	for i, u := range pool {
		t.dials[i] = u.Dial
		t.keys[i] = xxh3.HashString(u.Dial)
	}
	// One clone of the index's name table for the whole pool (Intern
	// clones it per new name); an upstream that cannot be interned (the
	// name table is full) keeps ID 0: routed to, never indexed.
	t.ids, _ = ix.InternAll(t.dials, t.ids)
	return t
}
