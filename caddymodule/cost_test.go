package caddymodule_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// With choice cost, a warm conversation stays on its holder while
// nothing is queued there, and leaves it once the holder's queue exceeds
// what the move throws away; the rules, and the cost with a large
// cache_weight, keep it home. Three sites over four backends share one
// index and one set of queues. A stream of ~45 KB of uncached prompt is
// held open on the holder (queued at 1 KiB/s, so it drains in ~45 s, far
// longer than the test); the follow-up matches ~10 KB there, so at the
// default weight 2 it moves when the queue exceeds (1+2) x 10 KB, and at
// weight 10 it would need ~110 KB.
func TestCostMovesAWarmConversationOffALongQueue(t *testing.T) {
	bs := newBackends(t, 4)
	release := make(chan struct{})
	holdStreams(bs, release)
	hdr := "header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}"
	const common = "prefill_rate 1KiB\n\t\t\tcold_load_factor off\n\t\t\t"
	ports := []int{freePort(t), freePort(t), freePort(t)}
	startCaddy(t, proxySite(ports[0], bs, hdr, common+"choice cost")+
		proxySite(ports[1], bs, hdr, common+"choice rules")+
		proxySite(ports[2], bs, hdr, common+"choice cost\n\t\t\tcache_weight 10"))
	url := func(i int) string { return fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", ports[i]) }
	cost, rules, heavy := url(0), url(1), url(2)

	system := words("system A", 800) // ~10 KB
	followUp := chat(system, "first question", "an answer", "a short follow-up")
	ask := func(site string) (backend, reason string) {
		t.Helper()
		resp, err := http.Post(site, "application/json", bytes.NewReader(followUp))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: status %d", site, resp.StatusCode)
		}
		return resp.Header.Get("X-Backend"), resp.Header.Get("X-PC-Reason")
	}

	home, _ := post(t, http.DefaultClient, cost, chat(system, "first question"))
	if got, reason := ask(cost); got != home || reason != "match" {
		t.Fatalf("follow-up with nothing queued: %s (%s), want match on %s", got, reason, home)
	}

	// The long turn shares too little of itself with home to count
	// (min_match_ratio), so it goes by rendezvous hashing: home again.
	held := openStream(t, rules, chat(system, "first question", "an answer", words("long paste", 3000)))
	defer func() {
		close(release)
		io.Copy(io.Discard, held.Body)
		held.Body.Close()
	}()
	if got := held.Header.Get("X-Backend"); got != home {
		t.Fatalf("held long turn on %s, want its conversation's %s", got, home)
	}

	if got, reason := ask(rules); got != home || reason != "match" {
		t.Errorf("choice rules, ~45 KB queued at home: %s (%s), want match on %s", got, reason, home)
	}
	if got, reason := ask(heavy); got != home || reason != "match" {
		t.Errorf("choice cost, cache_weight 10, ~45 KB queued at home: %s (%s), want match on %s", got, reason, home)
	}
	if got, reason := ask(cost); got == home || reason != "spill_cold" {
		t.Errorf("choice cost, ~45 KB queued at home: %s (%s), want spill_cold away from %s", got, reason, home)
	}
}

// With choice cost, a new conversation whose rendezvous-hash winner has
// ~20 KB of prefill queued, far more than its own ~1.5 KB, goes elsewhere
// (reason prefill); with prefill_rate off it stays on the winner.
func TestCostPlacesNewConversationsOffALongQueue(t *testing.T) {
	checkBusyWinner(t, chat(words("long held prompt", 1300), "hold"),
		"cold_load_factor off\n\t\t\tprefill_rate 1KiB\n\t\t\tchoice cost", "cold_load_factor off\n\t\t\tprefill_rate off", "prefill")
}
