package caddymodule

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// released waits until tab holds no bytes at id: a charge is given back by
// a context.AfterFunc callback, which runs on a goroutine of its own once
// the context is done. It fails the test after a deadline.
func released(t *testing.T, tab *inflightBytes, id uint16) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for tab[id].Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("upstream %d still holds %d bytes after its requests ended", id, tab[id].Load())
		}
		runtime.Gosched()
	}
}

func TestChargeMovesAndReleases(t *testing.T) {
	tab, utab := new(inflightBytes), new(inflightBytes)
	ctx, cancel := context.WithCancel(context.Background())
	var c charge

	c.move(ctx, tab, utab, 1, 1000, 300)
	if got, ugot := tab.load(1), utab.load(1); got != 1000 || ugot != 300 {
		t.Fatalf("after the first attempt upstream 1 holds %d bytes, %d uncached, want 1000 and 300", got, ugot)
	}
	// A retry moves the whole charge to the upstream it chose, with what
	// that one lacks.
	c.move(ctx, tab, utab, 2, 1000, 1000)
	if a, b := tab.load(1), tab.load(2); a != 0 || b != 1000 {
		t.Fatalf("after a retry upstreams 1 and 2 hold %d and %d bytes, want 0 and 1000", a, b)
	}
	if a, b := utab.load(1), utab.load(2); a != 0 || b != 1000 {
		t.Fatalf("after a retry upstreams 1 and 2 hold %d and %d uncached bytes, want 0 and 1000", a, b)
	}
	cancel()
	released(t, tab, 2)
	released(t, utab, 2)
	if got, ugot := tab.load(1), utab.load(1); got != 0 || ugot != 0 {
		t.Fatalf("after the request ended upstream 1 holds %d bytes, %d uncached", got, ugot)
	}
	// An attempt after the end (the client went away mid-retry) charges
	// nothing that would never be released.
	c.move(ctx, tab, utab, 3, 1000, 1000)
	if got, ugot := tab.load(3), utab.load(3); got != 0 || ugot != 0 {
		t.Fatalf("a move after the end charged %d bytes, %d uncached", got, ugot)
	}
}

// A request whose context is already done when it is charged (the client
// left during the body read) gives its bytes back too.
func TestChargeAfterContextDone(t *testing.T) {
	tab, utab := new(inflightBytes), new(inflightBytes)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var c charge
	c.move(ctx, tab, utab, 4, 500, 200)
	released(t, tab, 4)
	released(t, utab, 4)
}

func TestChargeManyRequests(t *testing.T) {
	tab, utab := new(inflightBytes), new(inflightBytes)
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, 64)
	for i := range cancels {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Go(func() {
			var c charge
			c.move(ctx, tab, utab, 7, int64(i+1), 1)
		})
	}
	wg.Wait()
	if got, want := tab.load(7), int64(64*65/2); got != want {
		t.Fatalf("64 requests hold %d bytes, want %d", got, want)
	}
	if got := utab.load(7); got != 64 {
		t.Fatalf("64 requests hold %d uncached bytes, want 64", got)
	}
	for _, cancel := range cancels {
		wg.Go(cancel)
	}
	wg.Wait()
	released(t, tab, 7)
	released(t, utab, 7)
}
