package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestPartitionedEdgeKeepsHomes: under choice cost, an edge whose sync
// channel is down places by the home every edge computes alike, and
// moves a request off it only on a clear saving; with the channel up it
// places by the least cost. A short prompt held at one backend leaves
// ~800 bytes queued there, draining at 32 B/s: new conversations whose
// rendezvous home it is move off it while Redis is up (the least cost),
// stay on it while Redis is down (less than the sticky margin of a
// request's own prefill, at least 1 KiB, plus its prefill elsewhere), and
// move again once Redis is back.
func TestPartitionedEdgeKeepsHomes(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 4)
	e := startTier(t, 1, bs, r.URL(), "choice cost\n\t\t\tprefill_rate 32B")[0]
	waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, e).Sync.Connected })

	var wg sync.WaitGroup
	wg.Go(func() { hold(e.url, chat(words("h", 150), "hold")) })
	defer func() {
		for _, x := range bs {
			close(x.hold)
		}
		wg.Wait()
	}()
	var busy string
	waitFor(t, 5*time.Second, "the short prompt held", func() bool {
		for dial, u := range upstreams(t, e) {
			if u.InFlight == 1 && u.PrefillBacklog > 600 {
				busy = dial
				return true
			}
		}
		return false
	})

	// next places new conversations until one prefers busy, and
	// returns its reason and whether it went there.
	n := 0
	next := func() (string, bool) {
		t.Helper()
		for range 200 {
			n++
			req := chat(words(fmt.Sprintf("conversation %d", n), 20), "hello")
			code, h := post(t, e.url, "", req)
			if code != 200 {
				t.Fatalf("conversation %d: status %d", n, code)
			}
			if h.Get("X-PC-Preferred") == busy {
				return h.Get("X-PC-Reason"), dialOf(bs, h.Get("X-Backend")) == busy
			}
		}
		t.Fatalf("no new conversation of 200 preferred %s", busy)
		return "", false
	}
	check := func(phase, wantReason string, wantBusy bool) {
		t.Helper()
		for range 3 {
			if reason, atBusy := next(); reason != wantReason || atBusy != wantBusy {
				t.Errorf("%s: a new conversation whose home is %s: %s, on it %v; want %s, on it %v",
					phase, busy, reason, atBusy, wantReason, wantBusy)
			}
		}
	}
	// The policy reads the connection's state every 100 ms.
	moved := func() bool {
		reason, atBusy := next()
		return reason == "prefill" && !atBusy
	}
	waitFor(t, 5*time.Second, "a new conversation moved", moved)
	check("Redis up", "prefill", false)

	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the edge notices Redis is gone", func() bool { return !stats(t, e).Sync.Connected })
	waitFor(t, 5*time.Second, "a new conversation kept home", func() bool {
		reason, atBusy := next()
		return reason == "cold" && atBusy
	})
	check("Redis down", "cold", true)

	if err := r.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the edge reconnects", func() bool { return stats(t, e).Sync.Connected })
	waitFor(t, 5*time.Second, "a new conversation moved", moved)
	check("Redis back", "prefill", false)
	if u := upstreams(t, e)[busy]; u.PrefillBacklog < 100 {
		t.Fatalf("the queue at %s drained to %d bytes during the test; it no longer shows the margin", busy, u.PrefillBacklog)
	}
}
