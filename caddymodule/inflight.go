package caddymodule

import (
	"sync"
	"sync/atomic"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// inflightBytes counts, per interned upstream, the routing-text bytes of
// the requests this process has sent it and not yet finished: the load
// signal of the byte bound (all bytes) and the cap of the prefill backlog
// (the uncached bytes, see prefillQueues). Caddy's Upstream.NumRequests
// counts requests alike whatever their size; a long agent context holds
// many times the KV memory of a short chat turn, and an engine fills its
// KV cache, then preempts and evicts, long before its request count looks
// high.
//
// It is kept per shared state (one index, one table), so two prefix_cache
// configurations with different chunk sizes in one process do not see each
// other's bytes; they still share Caddy's request counts. A slot belongs to
// an ID; if the janitor forgets an upstream and its ID is reused, the new
// upstream inherits the old one's outstanding bytes until those requests
// finish, at most the length of the longest request.
type inflightBytes [prefixindex.MaxIDs + 1]atomic.Int64

func (t *inflightBytes) load(id prefixindex.ID) int64 { return max(t[id].Load(), 0) }

// charge is what one request has added to the in-flight tables: nothing,
// or at one upstream n bytes of routing text to a table of all bytes and
// u of them, the part the upstream was not believed to hold, to a table of
// uncached bytes. A retry moves the charge to the upstream it chose; the
// charge is released when the request's context is done (its handler
// returned: the response, streamed or not, has ended; see peeked.finish)
// whatever happens in between. Attempts run one after another on the
// request's goroutine, but the context can end concurrently with an
// attempt (the client goes away), hence the lock.
type charge struct {
	mu   sync.Mutex
	tab  *inflightBytes // nil when nothing is charged
	utab *inflightBytes
	id   prefixindex.ID // the upstream last charged, kept after the release
	dial string         // its Dial
	from int            // the first hash a sync message about it carries
	n, u int64
	done bool // released for good: the request has ended
}

// move charges n bytes to id in tab and u to id in utab, releasing what an
// earlier attempt of this request charged. It reports false, charging
// nothing, once the request has ended.
func (c *charge) move(tab, utab *inflightBytes, id prefixindex.ID, dial string, from int, n, u int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false
	}
	c.give()
	c.tab, c.utab, c.id, c.dial, c.from, c.n, c.u = tab, utab, id, dial, from, n, u
	tab[id].Add(n)
	utab[id].Add(u)
	return true
}

// release gives back what is charged, and returns the upstream last
// charged (ID 0 if none), its Dial and the first hash to sync; later moves
// charge nothing.
func (c *charge) release() (prefixindex.ID, string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.give()
	c.done = true
	return c.id, c.dial, c.from
}

// last returns the upstream last charged (ID 0 if none), the routing
// text charged to it and the part of it that upstream was not believed
// to hold, before or after the release.
func (c *charge) last() (prefixindex.ID, int64, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id, c.n, c.u
}

// give gives back what is charged. c.mu must be held.
func (c *charge) give() {
	if c.tab != nil {
		c.tab[c.id].Add(-c.n)
		c.utab[c.id].Add(-c.u)
		c.tab, c.utab = nil, nil
	}
}
