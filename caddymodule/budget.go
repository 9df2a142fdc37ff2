package caddymodule

import (
	"math"
	"runtime/debug"
	"sync/atomic"
)

// The body budget bounds the bytes that every prefix_cache policy of the
// process holds in request-body buffers at once, whatever the traffic:
// many concurrent long prompts, clients that declare large bodies and
// trickle them, uploads that stall. A buffer is charged its whole
// capacity (the pool's size class, so the pool's rounding is counted)
// before it is allocated or taken from the pool, and uncharged when it
// goes back. A request whose body would take the held bytes past the
// budget is not read at all when its Content-Length says so, and stops
// being read, replaying what it sent, when a chunked or trickling body
// gets there; either way it goes to the fallback policy, body untouched
// (skip reason "budget").
//
// Idle buffers in the pool are not charged: sync.Pool drops them within
// two garbage collections.

// DefaultBodyBudgetFraction is the share of the process's memory limit
// (GOMEMLIMIT, which Caddy sets from the container's cgroup limit) that
// the body budget takes by default: a quarter leaves the rest to Caddy's
// own buffers, TLS and HTTP/2 state, the index and the garbage collector's
// headroom.
const DefaultBodyBudgetFraction = 0.25

// DefaultBodyBudgetNoLimit is the default body budget when the process has
// no memory limit: 256 MiB, 64 default-max_body requests at once, or a
// thousand 256 KiB agent contexts. Buffers are held only while a request
// is read and sent to its engine (see reuse.go), not while its response
// streams, so this is rarely reached.
const DefaultBodyBudgetNoLimit = 256 << 20

// minBodyBudget keeps a derived default useful under a tiny memory limit.
const minBodyBudget = 16 << 20

// defaultBodyBudget returns the default body_budget for this process.
func defaultBodyBudget() int64 {
	limit := debug.SetMemoryLimit(-1) // reads the limit without changing it
	if limit <= 0 || limit == math.MaxInt64 {
		return DefaultBodyBudgetNoLimit
	}
	return max(int64(float64(limit)*DefaultBodyBudgetFraction), minBodyBudget)
}

// bodyHeld is the bytes of body buffers held by requests of the process.
var bodyHeld atomic.Int64

// charge reserves n bytes of the budget limit, and reports whether they
// fit.
func chargeBody(n, limit int64) bool {
	for {
		held := bodyHeld.Load()
		if held+n > limit {
			return false
		}
		if bodyHeld.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

// unchargeBody gives back n bytes charged by chargeBody.
func unchargeBody(n int64) { bodyHeld.Add(-n) }
