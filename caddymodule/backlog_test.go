package caddymodule

import (
	"sync"
	"testing"
	"time"
)

// A queue drains at the rate, one request after another, and an idle
// upstream starts a new request's prefill when it arrives.
func TestPrefillQueueDrains(t *testing.T) {
	q := new(prefillQueues)
	const nsPerByte = 1e6 // 1000 bytes per second
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(d time.Duration) int64 { return t0 + int64(d) }

	if got := q.load(1, t0, nsPerByte); got != 0 {
		t.Fatalf("a fresh queue holds %d bytes", got)
	}
	q.add(1, t0, 500, nsPerByte)
	q.add(1, t0, 500, nsPerByte)
	for _, c := range []struct {
		at   time.Duration
		want int64
	}{{0, 1000}, {200 * time.Millisecond, 800}, {999 * time.Millisecond, 1}, {time.Second, 0}, {time.Hour, 0}} {
		if got := q.load(1, at(c.at), nsPerByte); got != c.want {
			t.Errorf("%v after 1000 bytes were queued the queue holds %d bytes, want %d", c.at, got, c.want)
		}
	}
	// Idle since t0+1s: a request at t0+5s waits for nothing before it.
	q.add(1, at(5*time.Second), 300, nsPerByte)
	if got := q.load(1, at(5*time.Second), nsPerByte); got != 300 {
		t.Errorf("a request queued on a drained upstream leaves %d bytes, want 300", got)
	}
	if got := q.load(2, at(5*time.Second), nsPerByte); got != 0 {
		t.Errorf("another upstream holds %d bytes", got)
	}
}

func TestPrefillQueueConcurrentAdds(t *testing.T) {
	q := new(prefillQueues)
	const nsPerByte = 1e6
	now := time.Now().UnixNano()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() { q.add(3, now, 10, nsPerByte) })
	}
	wg.Wait()
	if got := q.load(3, now, nsPerByte); got != 640 {
		t.Fatalf("64 concurrent requests of 10 bytes queued %d bytes, want 640", got)
	}
}
