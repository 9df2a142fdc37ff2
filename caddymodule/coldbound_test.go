package caddymodule_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// A new conversation whose rendezvous-hash winner carries more than the
// mean in flight goes to another backend under the default cold bound,
// and to the winner with cold_load_factor off. One stream is held open on
// a backend of four, so that backend carries 1 request in flight and the
// others none: the cold bound is ceil(1 x (1 + 1) / 4) = 1, and the
// request bound (allowance 16) holds for every backend. Two sites share
// the backends, and Caddy's in-flight counts with them.
func TestColdBoundBalancesNewConversations(t *testing.T) {
	bs := newBackends(t, 4)
	release := make(chan struct{})
	holdStreams(bs, release)
	onPort, offPort := freePort(t), freePort(t)
	hdr := "header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}\n\t\t" +
		"header_down X-PC-Preferred {http.reverse_proxy.prefix_cache.preferred}"
	startCaddy(t, proxySite(onPort, bs, hdr, "")+proxySite(offPort, bs, hdr, "cold_load_factor off"))
	url := func(port int) string { return fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port) }

	held := openStream(t, url(onPort), chat(words("held", 100), "hold"))
	defer func() {
		close(release)
		io.Copy(io.Discard, held.Body)
		held.Body.Close()
	}()
	busy := held.Header.Get("X-Backend")
	var busyDial string
	for _, b := range bs {
		if b.name == busy {
			busyDial = b.addr()
		}
	}
	if busyDial == "" {
		t.Fatalf("held stream answered by %q, not a backend", busy)
	}

	// New conversations, each sent once, until each site has placed a few
	// whose rendezvous winner is the busy backend.
	seen := map[int]int{}
	for i := 0; i < 200 && (seen[onPort] < 3 || seen[offPort] < 3); i++ {
		port := onPort
		if i%2 == 1 {
			port = offPort
		}
		resp, err := http.Post(url(port), "application/json", bytes.NewReader(chat(words(fmt.Sprintf("conversation %d", i), 100), "hello")))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("X-PC-Preferred") != busyDial {
			continue
		}
		seen[port]++
		reason, got := resp.Header.Get("X-PC-Reason"), resp.Header.Get("X-Backend")
		switch {
		case port == onPort && (reason != "cold_spill" || got == busy):
			t.Errorf("conversation %d, cold bound on: reason %q on %s, want cold_spill away from %s (1 in flight, cold bound 1)", i, reason, got, busy)
		case port == offPort && (reason != "cold" || got != busy):
			t.Errorf("conversation %d, cold bound off: reason %q on %s, want cold on %s", i, reason, got, busy)
		}
	}
	if seen[onPort] < 3 || seen[offPort] < 3 {
		t.Fatalf("too few new conversations preferred the busy backend: %d with the cold bound, %d without", seen[onPort], seen[offPort])
	}
}
