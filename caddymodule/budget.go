package caddymodule

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The body budget bounds the memory that the request-body buffers (and
// the routing-text buffers rendered from them, scratch.go, and the chunk
// hashes of the requests being routed) of every prefix_cache policy of the
// process take, whatever the traffic:
// many concurrent long prompts, clients that declare large bodies and
// trickle them, uploads that stall. It counts every buffer from its
// allocation until the garbage collector frees it (a runtime cleanup
// gives it back): in use by a request, idle in the pool, or dropped by the
// pool and not yet collected, at its allocated size (the size class, so
// the pool's rounding is counted). A buffer is allocated only if it fits;
// one from the pool costs nothing new. A request whose declared body
// would not fit beside the bytes in use is not read at all; one that
// reaches the budget while it arrives stops being read, its bytes are
// replayed, and the rest streams as it comes. Either way it goes to the
// fallback policy, body untouched (skip reason "budget").
//
// The budget is what buffering may add to Caddy's memory, so it covers
// the garbage collector's headroom too: the collector lets the heap grow
// past what is live by GOGC percent before it collects, so every live
// buffer byte lets a GOGC/100 byte of any garbage (Caddy's own included)
// wait for collection beside it (bench/memory shows it under overload).
// Buffers therefore get budget / (1 + GOGC/100) of it: half, at Go's
// default GOGC of 100.

// DefaultBodyBudgetFraction is the share of the process's memory limit
// (GOMEMLIMIT; Caddy's main sets it to 90% of the container's cgroup
// limit, or of the machine's memory) that the body budget takes by
// default, up to DefaultBodyBudgetMax: an eighth leaves the rest to
// Caddy's own buffers, TLS and HTTP/2 state, the index and the garbage
// collector's headroom (the heap may grow to twice what is live before a
// collection).
const DefaultBodyBudgetFraction = 0.125

// DefaultBodyBudgetMax caps the default body budget, and is the default
// without a memory limit: 256 MiB leaves buffers 128 MiB at the default
// GOGC (see gcHeadroom), about 25 bodies of the default max_body at once,
// or 500 agent contexts of 256 KiB. Buffers are held only while
// a request is read and sent to its engine (reuse.go), not while its
// response streams, so legitimate traffic rarely reaches it; a burst
// beyond it is served through the fallback policy rather than held.
const DefaultBodyBudgetMax = 256 << 20

// minBodyBudget keeps a derived default useful under a tiny memory limit.
const minBodyBudget = 16 << 20

// defaultBodyBudget returns the default body_budget for this process.
func defaultBodyBudget() int64 {
	limit := debug.SetMemoryLimit(-1) // reads the limit without changing it
	if limit <= 0 || limit == math.MaxInt64 {
		return DefaultBodyBudgetMax
	}
	return min(max(int64(float64(limit)*DefaultBodyBudgetFraction), minBodyBudget), DefaultBodyBudgetMax)
}

// gcHeadroom is how much heap a live byte costs before the collector runs:
// 1 + GOGC/100, read from the environment as the runtime reads it (100
// when unset or unparsable; off or negative: 1, the memory limit alone
// bounding the heap).
var gcHeadroom = sync.OnceValue(func() float64 { return headroomOf(os.Getenv("GOGC")) })

func headroomOf(gogc string) float64 {
	if gogc == "off" {
		return 1
	}
	n, err := strconv.Atoi(gogc)
	switch {
	case err != nil:
		return 2
	case n < 0:
		return 1
	}
	return 1 + float64(n)/100
}

// fits reports whether n buffer bytes, with the collector's headroom for
// them, stay within budget.
func fits(n, budget int64) bool { return float64(n)*gcHeadroom() <= float64(budget) }

// bodyAllocated is the bytes of body buffers alive, in use or not;
// bodyInUse those that requests hold; bodyHashes the chunk hashes of the
// requests being routed (8 bytes per chunk, up to max_chunks), which
// count against the budget from their derive to the request's end.
var bodyAllocated, bodyInUse, bodyHashes atomic.Int64

// reserveHashes counts n bytes of a request's hashes against budget, and
// reports whether they fit; releaseHashes gives them back.
func reserveHashes(n, budget int64) bool {
	for {
		cur := bodyHashes.Load()
		if !fits(bodyAllocated.Load()+cur+n, budget) {
			return false
		}
		if bodyHashes.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func releaseHashes(n int64) { bodyHashes.Add(-n) }

// allocBody allocates a buffer of capacity bytes if the allocated bytes
// stay within budget, and arranges for them to be given back when the
// garbage collector frees it. It returns nil if the buffer does not fit.
func allocBody(capacity int, budget int64) []byte {
	n := int64(capacity)
	for {
		cur := bodyAllocated.Load()
		if !fits(cur+bodyHashes.Load()+n, budget) {
			if budgetShort.Load() != budget {
				budgetShort.Store(budget)
			}
			if fits(bodyInUse.Load()+bodyHashes.Load()+n, budget) {
				// It would fit beside what requests hold: the rest is
				// idle in the pools or garbage.
				reclaim()
			}
			return nil
		}
		if bodyAllocated.CompareAndSwap(cur, cur+n) {
			break
		}
	}
	b := make([]byte, capacity)
	runtime.AddCleanup(&b[0], func(n int64) { bodyAllocated.Add(-n) }, n)
	return b[:0]
}

// Buffers back in the pools, or dropped by them, count against the budget
// until the collector frees them, and the pools keep what they hold for
// a cycle more. Left to itself, an idle process collects every two
// minutes, so the buffers of an attack that has ended (uploads that
// stalled until the budget was spent) would keep new bodies from being
// read for that long. So when an allocation does not fit though it would
// beside what requests hold, or when a buffer comes back after an
// allocation did not fit, while the budget is three quarters spent and
// requests hold at most half of what is allocated, the collector is
// asked to run: twice, to empty the pools, at most once per
// reclaimInterval, and again while that frees something and the budget
// stays so spent.

// reclaimInterval is the least time between two collections asked for by
// the budget: at most two collections a second, whatever the traffic.
const reclaimInterval = time.Second

// budgetShort is the budget of the last allocation that did not fit, and
// 0 once collecting frees nothing more.
var budgetShort atomic.Int64

// reclaimRunning is set while a goroutine runs collections; reclaimWanted
// asks it for one more.
var reclaimRunning, reclaimWanted atomic.Bool

// releasedBuffer is called when a buffer stops being in use.
func releasedBuffer() {
	if b := budgetShort.Load(); b > 0 && idleSpent(b) {
		reclaim()
	}
}

// idleSpent reports whether the buffers allocated spend three quarters of
// budget while requests hold at most half of them.
func idleSpent(budget int64) bool {
	allocated := bodyAllocated.Load()
	return 2*bodyInUse.Load() <= allocated && !fits(allocated+bodyHashes.Load(), budget*3/4)
}

// reclaim asks for the pools to be emptied and their buffers collected,
// on a goroutine of its own, at most once per reclaimInterval.
func reclaim() {
	reclaimWanted.Store(true)
	if reclaimRunning.CompareAndSwap(false, true) {
		go collectIdle()
	}
}

func collectIdle() {
	for {
		for reclaimWanted.Swap(false) {
			before := bodyAllocated.Load()
			// The first collection moves what the pools hold to their
			// victim caches, the second drops it; the runtime's
			// cleanups then give its bytes back to the budget.
			runtime.GC()
			runtime.GC()
			time.Sleep(reclaimInterval) // pacing, and the cleanups' time to run
			b := budgetShort.Load()
			switch {
			case bodyAllocated.Load() > before-before/8:
				// Little was idle: nothing more to gain until an
				// allocation fails again.
				budgetShort.CompareAndSwap(b, 0)
			case b > 0 && idleSpent(b):
				reclaimWanted.Store(true)
			}
		}
		reclaimRunning.Store(false)
		// A request made between the last Swap and the Store above
		// would be lost without this.
		if !reclaimWanted.Load() || !reclaimRunning.CompareAndSwap(false, true) {
			return
		}
	}
}
