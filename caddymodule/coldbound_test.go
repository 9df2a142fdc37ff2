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
// request bound (allowance 16) holds for every backend. prefill_rate is
// off on both sites: the held stream's backlog would also move new
// conversations (TestBacklogPlacesNewConversations). The cold bound is
// one of the rules: the cost does not read it.
func TestColdBoundBalancesNewConversations(t *testing.T) {
	checkBusyWinner(t, chat(words("held", 100), "hold"),
		"choice rules\n\t\t\tprefill_rate off", "choice rules\n\t\t\tcold_load_factor off\n\t\t\tprefill_rate off", "cold_spill")
}

// checkBusyWinner holds a stream of body open on one backend of four,
// behind two sites sharing the index with policy options on and off, and
// sends new conversations, alternately to each site, until each has
// placed a few whose rendezvous-hash winner is the busy backend: site on
// must move every one away with reason wantOn, site off must place it on
// the winner (reason cold). Caddy's in-flight counts are shared too.
func checkBusyWinner(t *testing.T, body []byte, onOptions, offOptions, wantOn string) {
	t.Helper()
	bs := newBackends(t, 4)
	release := make(chan struct{})
	holdStreams(bs, release)
	hdr := "header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}\n\t\t" +
		"header_down X-PC-Preferred {http.reverse_proxy.prefix_cache.preferred}"
	on, off, _ := twoSites(t, bs, hdr, onOptions, offOptions)

	held := openStream(t, on, body)
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

	seen := map[string]int{}
	for i := 0; i < 200 && (seen[on] < 3 || seen[off] < 3); i++ {
		url := on
		if i%2 == 1 {
			url = off
		}
		resp, err := http.Post(url, "application/json", bytes.NewReader(chat(words(fmt.Sprintf("conversation %d", i), 100), "hello")))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("X-PC-Preferred") != busyDial {
			continue
		}
		seen[url]++
		reason, got := resp.Header.Get("X-PC-Reason"), resp.Header.Get("X-Backend")
		switch {
		case url == on && (reason != wantOn || got == busy):
			t.Errorf("conversation %d, site on: reason %q on %s, want %s away from %s", i, reason, got, wantOn, busy)
		case url == off && (reason != "cold" || got != busy):
			t.Errorf("conversation %d, site off: reason %q on %s, want cold on %s", i, reason, got, busy)
		}
	}
	if seen[on] < 3 || seen[off] < 3 {
		t.Fatalf("too few new conversations preferred the busy backend: %d on site on, %d on site off", seen[on], seen[off])
	}
}
