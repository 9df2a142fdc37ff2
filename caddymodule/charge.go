package caddymodule

import (
	"sync"

	"github.com/prefixcache/caddy-prefixcache/fleet"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// charge is what one request has placed in its policy's fleet (a
// fleet.Ticket), with what the request's end needs to tell the other
// edges: the Dial of the upstream last chosen and the first hash a sync
// message about it carries. Attempts run one after another on the
// request's goroutine, but the context can end concurrently with an
// attempt (the client goes away), hence the lock.
type charge struct {
	mu     sync.Mutex
	ticket fleet.Ticket
	dial   string // the upstream last placed, kept after the settle
	from   int    // the first hash a sync message about it carries
}

// place places the request at id, the upstream at dial, in s's fleet,
// moving what an earlier attempt placed. It reports false, placing
// nothing, once the request has ended.
func (c *charge) place(s *PrefixCacheSelection, id prefixindex.ID, dial string, from int, now, n, u int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.state.fleet.Place(&c.ticket, id, dial, now, n, u, &s.fleetOptions) {
		return false
	}
	c.dial, c.from = dial, from
	return true
}

// settle gives back what is placed, and returns the upstream last placed
// (ID 0 if none), its Dial and the first hash to sync; later places
// place nothing.
func (c *charge) settle() (prefixindex.ID, string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ticket.Settle(), c.dial, c.from
}

// close ends the charge without placing anything: the request ended
// before it was routed.
func (c *charge) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ticket.Settle()
}

// last returns the upstream last placed (ID 0 if none), the routing text
// placed there and the part of it that upstream was not believed to
// hold, before or after the settle.
func (c *charge) last() (prefixindex.ID, int64, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ticket.Last()
}
