package caddymodule_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// postReason posts body and returns the policy's reason for it, read from
// a header_down of the reason placeholder.
func postReason(t *testing.T, url string, body []byte) string {
	t.Helper()
	reason, _ := postRoute(t, url, body)
	return reason
}

// postRoute posts body, reads the whole answer (a stream included, so
// that whatever reads it has read it all), and returns the X-PC-Reason
// and X-PC-Upstream response headers a site's header_down sets.
func postRoute(t *testing.T, url string, body []byte) (reason, upstream string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d", url, resp.StatusCode)
	}
	return resp.Header.Get("X-PC-Reason"), resp.Header.Get("X-PC-Upstream")
}

// A request that shares only a short preamble with what an upstream holds
// (a common system prompt in front of a long prompt of its own) is placed
// as a new conversation when the match covers less than min_match_ratio of
// it; a request the preamble is most of still follows the preamble. Two
// sites share one index, one with the default ratio (0.3) and one with the
// ratio off.
func TestMinMatchRatio(t *testing.T) {
	bs := newBackends(t, 2)
	ratioPort, offPort := freePort(t), freePort(t)
	reason := "header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}"
	startCaddy(t, proxySite(ratioPort, bs, reason, "")+proxySite(offPort, bs, reason, "min_match_ratio 0"))
	ratioURL := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", ratioPort)
	offURL := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", offPort)

	system := words("preamble", 400) // a few KiB: above min_match
	if got := postReason(t, ratioURL, chat(system, "warm up")); got != "cold" {
		t.Fatalf("first request: reason %q, want cold", got)
	}
	// The preamble is nearly all of this prompt: a match either way.
	if got := postReason(t, ratioURL, chat(system, "a short question")); got != "match" {
		t.Errorf("short prompt behind the preamble: reason %q with min_match_ratio 0.3, want match", got)
	}
	// The preamble is under a tenth of these prompts.
	long := func(seed string) []byte { return chat(system, words(seed, 6000)) }
	if got := postReason(t, ratioURL, long("own work 1")); got != "cold" {
		t.Errorf("long prompt behind the preamble: reason %q with min_match_ratio 0.3, want cold", got)
	}
	if got := postReason(t, offURL, long("own work 2")); got != "match" {
		t.Errorf("long prompt behind the preamble: reason %q with min_match_ratio 0, want match", got)
	}
}
