package caddymodule

import (
	"sync/atomic"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// prefillQueues estimates, per interned upstream, the prefill it has
// queued, by which cold requests are placed (prefill_rate). A selection
// policy cannot see an engine's queue, nor the first token that ends a
// request's prefill, so each upstream is modelled as a fluid queue that
// receives the uncached routing text of every request sent to it and
// prefills it at prefill_rate bytes per second, one request after another,
// as vLLM's and SGLang's schedulers do within their token budgets. One
// number holds the whole queue: the time it is estimated to drain.
//
//	on a request of n uncached bytes:  drain = max(drain, now) + n / rate
//	queued at time now:                max(drain - now, 0) x rate
//
// The estimate is never more than the uncached bytes of the requests still
// in flight at the upstream (the caller caps it), so a rate set too low
// cannot make a backlog grow without end, and an upstream that answers
// with errors at once sheds its backlog as its requests end. The queues
// belong to the shared state, like the in-flight bytes: two configs with
// one index feed the same queues, each at its own prefill_rate, so they
// should agree on it.
type prefillQueues [prefixindex.MaxIDs + 1]atomic.Int64 // unix ns

// add queues n bytes of prefill at id, at time now (unix ns), for an
// upstream prefilling nsPerByte nanoseconds per byte.
func (q *prefillQueues) add(id prefixindex.ID, now int64, n int64, nsPerByte float64) {
	d := int64(float64(max(n, 0)) * nsPerByte)
	for {
		old := q[id].Load()
		if q[id].CompareAndSwap(old, max(old, now)+d) {
			return
		}
	}
}

// load returns the bytes of prefill still queued at id at time now.
func (q *prefillQueues) load(id prefixindex.ID, now int64, nsPerByte float64) int64 {
	left := q[id].Load() - now
	if left <= 0 {
		return 0
	}
	return int64(float64(left) / nsPerByte)
}
