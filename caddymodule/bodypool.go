package caddymodule

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Body buffers are recycled through size-classed pools: allocating a
// buffer of the body's size for every request, and collecting it, was a
// large part of what the policy cost Caddy per byte (docs/overhead.md).
//
// A buffer goes back to its pool only when nothing can read it any more:
// the request's context is done (Caddy's handler has returned: no further
// attempt will route on it or hand it to a transport) AND the replay body
// has been closed by the transport or fully replayed (the transport may
// still be writing the request after RoundTrip returned, and a retry after
// a dial error re-reads a closed but unread body). Readers of the bytes
// (replayBody.Read, a re-derive on a retry) hold the buffer's lock or a
// pin; a read after the release gets errBodyReleased, never another
// request's bytes.

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

// bodyBuf is one request's body buffer and the state that decides when it
// returns to its pool.
type bodyBuf struct {
	b     []byte // len 0; cap is classSize(class), or anything when class < 0
	class int

	mu       sync.Mutex
	ctxDone  bool // the request's context is done
	bodyDone bool // the replay body was closed or fully replayed
	pins     int  // readers of b outside mu (a re-derive on a retry)
	released bool
}

// getBodyBuf returns a buffer with room for at least n bytes.
func getBodyBuf(n int) *bodyBuf {
	c := classOf(n)
	if c < 0 {
		return &bodyBuf{b: make([]byte, 0, n), class: -1}
	}
	if bb, ok := bodyPools[c].Get().(*bodyBuf); ok {
		return bb
	}
	return &bodyBuf{b: make([]byte, 0, classSize(c)), class: c}
}

// put returns a buffer nobody else has seen to its pool.
func (bb *bodyBuf) put() {
	if bb.class < 0 {
		return
	}
	bb.b = bb.b[:0]
	bb.ctxDone, bb.bodyDone, bb.pins, bb.released = false, false, 0, false
	bodyPools[bb.class].Put(bb)
}

// markCtxDone and markBodyDone record the two conditions of the release;
// the second of them releases the buffer, unless a reader holds a pin.
func (bb *bodyBuf) markCtxDone() {
	bb.mu.Lock()
	bb.ctxDone = true
	bb.maybeRelease()
	bb.mu.Unlock()
}

// markBodyDoneLocked is markBodyDone with mu held.
func (bb *bodyBuf) markBodyDoneLocked() {
	bb.bodyDone = true
	bb.maybeRelease()
}

func (bb *bodyBuf) markBodyDone() {
	bb.mu.Lock()
	bb.markBodyDoneLocked()
	bb.mu.Unlock()
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

func (bb *bodyBuf) maybeRelease() {
	if bb.released || !bb.ctxDone || !bb.bodyDone || bb.pins > 0 {
		return
	}
	bb.released = true
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
