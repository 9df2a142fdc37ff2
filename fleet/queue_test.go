package fleet

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

// Read's queue is the fluid estimate capped by the uncached bytes in
// flight (this edge's and the other edges' bytes), drained at the
// configured speed; with the queue off it is 0.
func TestReadQueue(t *testing.T) {
	var f Fleet
	o := &Options{NsPerByte: 1e6, Tier: true} // 1000 bytes per second
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	now := t0.UnixNano()
	var a, b Ticket
	f.Place(&a, 1, "a", now, 4000, 1000, o)
	f.Place(&b, 1, "a", now, 4000, 1000, o)
	s := f.Read(1, "a", now+int64(500*time.Millisecond), o)
	if s.Queued != 1500 || s.NsPerByte != 1e6 || s.Wait != int64(1500*time.Millisecond) {
		t.Errorf("Read half a second after 2000 bytes were queued = %+v, want 1500 queued, 1.5s to wait", s)
	}
	a.Settle()
	if s := f.Read(1, "a", now+int64(500*time.Millisecond), o); s.Queued != 1000 {
		t.Errorf("with 1000 uncached bytes in flight the queue reads %d, want the cap 1000", s.Queued)
	}
	// Another edge's bytes in flight raise the cap, and what it sent
	// since its previous report joins the queue.
	f.Report(9, t0, []Load{{ID: 1, Upstream: "a", Bytes: 5000, Sent: 100}}, o)
	f.Report(9, t0, []Load{{ID: 1, Upstream: "a", Bytes: 5000, Sent: 3100}}, o)
	if s := f.Read(1, "a", now, o); s.Queued != 5000 || s.RemoteBytes != 5000 {
		t.Errorf("after another edge sent 3000 bytes: %+v, want 5000 queued of 5000 remote bytes", s)
	}
	if s := f.Read(1, "a", now, &Options{Tier: true}); s.Queued != 0 || s.Wait != 0 {
		t.Errorf("with the queue off: %+v, want nothing queued", s)
	}
	b.Settle()
}
