package fleet

import (
	"sync/atomic"
	"time"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// prefillQueues estimates, per interned upstream, the prefill it has
// queued. A router cannot see an engine's queue, nor the first token
// that ends a request's prefill, so each upstream is modelled as a fluid
// queue that receives the uncached routing text of every request placed
// there and prefills it at the upstream's speed, one request after
// another, as vLLM's and SGLang's schedulers do within their token
// budgets. One number holds the whole queue: the time it is estimated to
// drain.
//
//	on a request of n uncached bytes:  drain = max(drain, now) + n x nsPerByte
//	queued at time now:                max(drain - now, 0) / nsPerByte
//
// The estimate is never more than the uncached bytes of the requests
// still in flight at the upstream (Read caps it), so a speed set too
// slow cannot make a queue grow without end, and an upstream that
// answers with errors at once sheds its queue as its requests end.
// Instances sharing a Fleet feed the same queues, each at its own
// configured speed, so they should agree on it.
//
// With the tier's reports, the queue is the tier's: the other edges'
// reports say how much uncached text each has sent the upstream (Sent),
// and what they sent since their previous report joins the queue as this
// edge's own requests do, a report interval late. Summing the edges'
// separate estimates instead would drain the queue once per edge with
// work in it, as if the upstream prefilled each edge's requests at the
// full rate at once.
type prefillQueues [prefixindex.MaxIDs + 1]atomic.Int64 // unix ns

// MaxWait bounds how far ahead a queue can drain: no prefill queue
// that routing can tell apart from another is longer than an hour, and
// the bound keeps the sum within an int64 whatever a report says.
const MaxWait = time.Hour

const maxWait = int64(MaxWait)

// add queues n bytes of prefill at id, at time now (unix ns), for an
// upstream prefilling nsPerByte nanoseconds per byte.
func (q *prefillQueues) add(id prefixindex.ID, now int64, n int64, nsPerByte float64) {
	d := int64(min(float64(max(n, 0))*nsPerByte, float64(maxWait)))
	for {
		old := q[id].Load()
		if q[id].CompareAndSwap(old, min(max(old, now)+d, now+maxWait)) {
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

// sentCounters counts, per interned upstream, the uncached routing text
// placed there since the Fleet was made: what this edge's load reports
// carry as Queued. It only grows (an upstream's ID is reused only once
// it has left every pool, and a counter that went backwards reads as a
// restart on the other edges).
type sentCounters [prefixindex.MaxIDs + 1]atomic.Uint64
