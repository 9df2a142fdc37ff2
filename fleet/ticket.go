package fleet

import (
	"sync/atomic"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// inflightBytes counts, per interned upstream, the routing-text bytes of
// the requests this edge has placed there and not yet settled: the load
// signal of the byte bound (all bytes) and the cap of the prefill queue
// (the uncached bytes). Caddy's Upstream.NumRequests counts requests
// alike whatever their size; a long agent context holds many times the
// KV memory of a short chat turn, and an engine fills its KV cache, then
// preempts and evicts, long before its request count looks high.
//
// A slot belongs to an ID; if the index forgets an upstream and its ID
// is reused, the new upstream inherits the old one's outstanding bytes
// until those requests finish, at most the length of the longest
// request.
type inflightBytes [prefixindex.MaxIDs + 1]atomic.Int64

func (t *inflightBytes) load(id prefixindex.ID) int64 { return max(t[id].Load(), 0) }

// Ticket is what one request has added to a Fleet's in-flight counts:
// nothing, or at one upstream its routing text and the part of it that
// upstream was not believed to hold. A Place on the same Ticket (a retry
// to another upstream) moves it; Settle gives it back for good, when
// the request has ended, whatever happened in between.
//
// The zero Ticket holds nothing. A Ticket is not safe for concurrent
// use: a request's attempts run one after another, but its end can come
// concurrently with an attempt (the client goes away), so the caller
// holds a lock around Place, Settle and Last.
type Ticket struct {
	f      *Fleet // nil when nothing is charged
	id     prefixindex.ID
	n, u   int64
	closed bool
}

// Place records a request of promptBytes bytes of routing text, of
// which uncachedBytes are not believed held there, placed at id, the
// upstream named upstream, at now (unix nanoseconds): its bytes count in
// flight there until Settle or the next Place on t, and its uncached
// bytes join id's prefill queue and Sent. It reports false, recording
// nothing, once t is settled.
func (f *Fleet) Place(t *Ticket, id prefixindex.ID, upstream string, now int64, promptBytes, uncachedBytes int64, o *Options) bool {
	if t.closed {
		return false
	}
	t.give()
	t.f, t.id, t.n, t.u = f, id, promptBytes, uncachedBytes
	f.bytes[id].Add(promptBytes)
	f.uncached[id].Add(uncachedBytes)
	f.sent[id].Add(uint64(max(uncachedBytes, 0)))
	if o.NsPerByte > 0 {
		f.queues.add(id, now, uncachedBytes, f.speed(id, upstream, now, o))
	}
	return true
}

// Settle gives back what t holds, and returns the upstream last placed
// (ID 0 if none); later Places record nothing. Settling a Ticket never
// placed only closes it.
func (t *Ticket) Settle() prefixindex.ID {
	t.give()
	t.closed = true
	return t.id
}

// Last returns the upstream last placed (ID 0 if none), the routing text
// placed there and the part of it that upstream was not believed to
// hold, before or after Settle.
func (t *Ticket) Last() (prefixindex.ID, int64, int64) {
	return t.id, t.n, t.u
}

// give gives back what t holds.
func (t *Ticket) give() {
	if t.f != nil {
		t.f.bytes[t.id].Add(-t.n)
		t.f.uncached[t.id].Add(-t.u)
		t.f = nil
	}
}
