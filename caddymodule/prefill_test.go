package caddymodule_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// Under the rules, a new conversation whose rendezvous-hash winner is
// busy with a long prefill goes to a backend with none queued, and to the
// winner with prefill_rate off. A stream of ~20 KB of prompt is held open
// on one backend of four: ~20 KB of uncached text in flight there, queued
// at 1 KiB/s, so it drains in ~20 s, far longer than the test. The cold
// bound is off on both sites, so only the backlog moves requests. The
// cost's placement is TestCostPlacesNewConversationsOffALongQueue.
func TestBacklogPlacesNewConversations(t *testing.T) {
	checkBusyWinner(t, chat(words("long held prompt", 1300), "hold"),
		"choice rules\n\t\t\tcold_load_factor off\n\t\t\tprefill_rate 1KiB", "choice rules\n\t\t\tcold_load_factor off\n\t\t\tprefill_rate off", "prefill")
}

// Under the rules, a warm request stays on its holder however long the
// holder's queue: moving it would throw its cached prefix away. (The cost
// weighs the queue against that prefix:
// TestCostMovesAWarmConversationOffALongQueue.)
func TestBacklogLeavesConversationsHome(t *testing.T) {
	bs := newBackends(t, 4)
	release := make(chan struct{})
	holdStreams(bs, release)
	port := freePort(t)
	startCaddy(t, proxySite(port, bs, "header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}", "choice rules\n\t\t\tprefill_rate 1KiB"))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	// The second turn's match (~10 KB of ~24 KB) covers min_match_ratio.
	system := words("system A", 800)
	home, _ := post(t, http.DefaultClient, url, chat(system, "first question"))
	held := openStream(t, url, chat(system, "first question", "an answer", words("long paste", 1000)))
	defer func() {
		close(release)
		io.Copy(io.Discard, held.Body)
		held.Body.Close()
	}()
	if got := held.Header.Get("X-Backend"); got != home {
		t.Fatalf("held second turn on %s, want its first turn's %s", got, home)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(chat(system, "first question", "an answer", "a short follow-up")))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got, reason := resp.Header.Get("X-Backend"), resp.Header.Get("X-PC-Reason"); got != home || reason != "match" {
		t.Errorf("another second turn: %s (%s), want match on %s, which has ~14 KB queued", got, reason, home)
	}
}
