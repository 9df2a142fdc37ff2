package caddymodule

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Body buffers are recycled through size-classed pools: allocating a
// buffer of the body's size for every request, and collecting it, would
// be a large part of what the policy costs Caddy per byte
// (docs/overhead.md).
// Every buffer counts against the body budget from its allocation until
// the garbage collector frees it; when idle buffers keep the budget spent,
// the collector is asked to run (budget.go).
//
// A buffer goes back to its pool as soon as nothing can read it any more
// (reuse.go says when Caddy can ask for the body again):
//
//   - when the request's context is done (Caddy's handler has returned: no
//     further attempt will route on it or hand it to a transport), or
//   - when the transport has taken the whole body (read it to the end, or
//     closed it after reading from it) and no retry can ask for it again
//     (keep is false).
//
// Readers of the bytes (replayBody.Read, a derive by a second policy
// instance) hold the buffer's lock or a pin; a read after the release gets
// errBodyReleased, never another request's bytes.

// Size classes: 2^k and 1.25, 1.5, 1.75 x 2^k, from 4 KiB to 16 MiB, so a
// buffer wastes at most a quarter of its size. Larger buffers are not
// pooled.
const (
	minClassShift = 12 // 4 KiB
	maxClassShift = 24 // 16 MiB
	numClasses    = (maxClassShift-minClassShift)*4 + 1
)

var bodyPools [numClasses]sync.Pool

// bodyReleased, when set (by tests), is called with the class of each
// buffer that goes back to its pool. Atomic: a release can run on a
// context.AfterFunc goroutine after the test that set the hook has
// removed it.
var bodyReleased atomic.Pointer[func(class int)]

// classSize returns the capacity of buffers of class c.
func classSize(c int) int {
	k, q := c/4+minClassShift, c%4
	return 1<<k + q<<(k-2)
}

// classOf returns the smallest class whose buffers hold n bytes, or -1 if
// n is larger than the largest class.
func classOf(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	if n > 1<<maxClassShift {
		return -1
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n <= 2^(k+1)
	// The quarter steps above 2^k: 2^k + q*2^(k-2) >= n.
	q := (n - 1<<k + 1<<(k-2) - 1) >> (k - 2)
	return (k-minClassShift)*4 + q
}

// capacityFor returns the capacity a buffer for n bytes has: its class's
// size, or n itself beyond the largest class.
func capacityFor(n int) int {
	if c := classOf(n); c >= 0 {
		return classSize(c)
	}
	return n
}

// bodyBuf is one request's body buffer and the state that decides when it
// returns to its pool.
type bodyBuf struct {
	b     []byte // len 0 in the pool; cap is classSize(class), or anything when class < 0
	class int
	inUse int64 // bytes counted in bodyInUse while a request holds it

	mu       sync.Mutex
	keep     bool // a retry may ask for the body again after it was sent
	ctxDone  bool // the request's context is done
	sent     bool // the transport took the whole body, or closed it after reading
	pins     int  // readers of b outside mu (a derive by another instance)
	released bool
}

// getBodyBuf returns a buffer with room for at least n bytes: one from the
// pool, else a new one if it fits within budget (budget.go), else one from
// the pool of a larger class (up to four times the size), else nil.
func getBodyBuf(n int, budget int64) *bodyBuf {
	c := classOf(n)
	if c < 0 {
		b := allocBody(n, budget)
		if b == nil {
			return nil
		}
		return inUse(&bodyBuf{b: b, class: -1})
	}
	if bb, ok := bodyPools[c].Get().(*bodyBuf); ok {
		return inUse(bb)
	}
	if b := allocBody(classSize(c), budget); b != nil {
		return inUse(&bodyBuf{b: b, class: c})
	}
	if bb := pooledFrom(c + 1); bb != nil {
		return inUse(bb)
	}
	return nil
}

// pooledFrom returns an idle buffer of class c or a larger one, up to four
// times the size, or nil: what the budget has room for when no new
// buffer fits.
func pooledFrom(c int) *bodyBuf {
	for larger := c; larger < min(c+9, numClasses); larger++ {
		if bb, ok := bodyPools[larger].Get().(*bodyBuf); ok {
			return bb
		}
	}
	return nil
}

// inUse counts bb as held by a request from now on.
func inUse(bb *bodyBuf) *bodyBuf {
	bb.inUse = int64(cap(bb.b))
	bodyInUse.Add(bb.inUse)
	bb.keep = true
	return bb
}

// put returns a buffer nobody else has seen to its pool.
func (bb *bodyBuf) put() {
	bodyInUse.Add(-bb.inUse)
	bb.inUse = 0
	releasedBuffer()
	if bb.class < 0 {
		return
	}
	bb.b = bb.b[:0]
	bb.keep, bb.ctxDone, bb.sent, bb.pins, bb.released = false, false, false, 0, false
	bodyPools[bb.class].Put(bb)
}

// markCtxDone records that the request is over, which releases the
// buffer unless a reader holds a pin.
func (bb *bodyBuf) markCtxDone() {
	bb.mu.Lock()
	bb.ctxDone = true
	bb.maybeRelease()
	bb.mu.Unlock()
}

// markSentLocked records that the transport took the body, which releases
// the buffer unless a retry may need it (keep) or a reader holds a pin.
// bb.mu must be held.
func (bb *bodyBuf) markSentLocked() {
	bb.sent = true
	bb.maybeRelease()
}

// setKeep says whether a retry may ask for the body again after it was
// sent; clearing it releases a buffer whose body was sent already.
func (bb *bodyBuf) setKeep(keep bool) {
	bb.mu.Lock()
	bb.keep = keep
	bb.maybeRelease()
	bb.mu.Unlock()
}

// keepsAfterSent reports whether the buffer is kept for a retry after its
// body was sent (and is still held).
func (bb *bodyBuf) keepsAfterSent() bool {
	bb.mu.Lock()
	defer bb.mu.Unlock()
	return bb.keep && !bb.released
}

// pin keeps the buffer from being released until unpin. It reports false
// if the buffer has been released already.
func (bb *bodyBuf) pin() bool {
	bb.mu.Lock()
	defer bb.mu.Unlock()
	if bb.released {
		return false
	}
	bb.pins++
	return true
}

func (bb *bodyBuf) unpin() {
	bb.mu.Lock()
	bb.pins--
	bb.maybeRelease()
	bb.mu.Unlock()
}

// isReleased reports whether the buffer went back to its pool.
func (bb *bodyBuf) isReleased() bool {
	bb.mu.Lock()
	defer bb.mu.Unlock()
	return bb.released
}

func (bb *bodyBuf) maybeRelease() {
	if bb.released || bb.pins > 0 || !(bb.ctxDone || bb.sent && !bb.keep) {
		return
	}
	bb.released = true
	bodyInUse.Add(-bb.inUse)
	bb.inUse = 0
	releasedBuffer()
	if bb.class < 0 {
		bb.b = nil
		return
	}
	// A new bodyBuf takes the bytes to the pool: this one may still be
	// referenced (by a replayBody or a peeked record) and must keep
	// saying "released".
	bodyPools[bb.class].Put(&bodyBuf{b: bb.b[:0], class: bb.class})
	bb.b = nil
	if f := bodyReleased.Load(); f != nil {
		(*f)(bb.class)
	}
}
