package caddymodule

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// inflightBytes counts, per interned upstream, the routing-text bytes of
// the requests this process has sent it and not yet finished: the load
// signal of the byte bound. Caddy's Upstream.NumRequests counts requests
// alike whatever their size; a long agent context holds many times the KV
// memory of a short chat turn, and an engine fills its KV cache, then
// preempts and evicts, long before its request count looks high.
//
// It is kept per shared state (one index, one table), so two prefix_cache
// configurations with different chunk sizes in one process do not see each
// other's bytes; they still share Caddy's request counts. A slot belongs to
// an ID; if the janitor forgets an upstream and its ID is reused, the new
// upstream inherits the old one's outstanding bytes until those requests
// finish, at most the length of the longest request.
type inflightBytes [prefixindex.MaxIDs + 1]atomic.Int64

func (t *inflightBytes) load(id prefixindex.ID) int64 { return max(t[id].Load(), 0) }

// charge is what one request has added to an inflightBytes table: nothing,
// or n bytes at one upstream. A retry moves the charge to the upstream it
// chose; the charge is released when the request's context is done (its
// handler returned: the response, streamed or not, has ended) whatever
// happens in between. Attempts run one after another on the request's
// goroutine, but the context can end concurrently with an attempt (the
// client goes away), hence the lock.
type charge struct {
	mu   sync.Mutex
	tab  *inflightBytes // nil when nothing is charged
	id   prefixindex.ID
	n    int64
	done bool // released for good: the request has ended
	stop func() bool
}

// move charges n bytes to id in tab, releasing what an earlier attempt of
// this request charged, and arranges the release when ctx is done.
func (c *charge) move(ctx context.Context, tab *inflightBytes, id prefixindex.ID, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	if c.tab != nil {
		c.tab[c.id].Add(-c.n)
	}
	c.tab, c.id, c.n = tab, id, n
	tab[id].Add(n)
	if c.stop == nil {
		c.stop = context.AfterFunc(ctx, c.release)
	}
}

// release gives back what is charged; later moves charge nothing.
func (c *charge) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tab != nil {
		c.tab[c.id].Add(-c.n)
		c.tab = nil
	}
	c.done = true
}
