package caddymodule_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// answersOf returns the answer stats the admin API shows for each
// upstream that has some.
func answersOf(t *testing.T, admin string) map[string]map[string]any {
	t.Helper()
	return upstreamField(t, admin, "answers")
}

// withStream makes a chat body streaming, with or without the usage
// chunk.
func withStream(body []byte, includeUsage bool) []byte {
	extra := `,"stream":true}`
	if includeUsage {
		extra = `,"stream":true,"stream_options":{"include_usage":true}}`
	}
	return append(body[:len(body)-1:len(body)-1], extra...)
}

// With prefix_cache_usage in front of the reverse_proxy, what the
// simulated vLLM engines answer about their caches (JSON answers and
// streams with the usage chunk) reaches the policy: the holder of a
// conversation reports the cached prompt of its later turns, the index
// predicted it, and the fleet's real hit rate is on Caddy's /metrics. A
// stream without the usage chunk teaches nothing.
func TestUsageReachesThePolicy(t *testing.T) {
	fleet, _ := startSimulatedFleet(t, 2, 0)
	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	prefix_cache_usage
	reverse_proxy %s {
		lb_policy prefix_cache
	}
}
`, port, strings.Join(fleet.Addrs(), " ")))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	send := func(body []byte) { t.Helper(); postRoute(t, url, body) }
	const series = "caddy_prefix_cache_answer_tokens_total"
	before := scrape(t, admin, series)
	system := words("usage", 600)
	send(chat(system, "first turn"))
	send(withStream(chat(system, "first turn", "an answer", "second turn"), true))
	send(chat(system, "first turn", "an answer", "second turn", "another", "third turn"))
	send(withStream(chat(system, "first turn", "an answer", "second turn", "another", "third turn", "more", "fourth turn"), false))

	answers := answersOf(t, admin)
	if len(answers) != 1 {
		t.Fatalf("answers on %d upstreams, want the conversation's holder alone: %v", len(answers), answers)
	}
	for dial, a := range answers {
		// Four turns, of which the stream without include_usage said
		// nothing.
		if a["answers"] != 3.0 {
			t.Errorf("%s: %v answers, want 3", dial, a["answers"])
		}
		if a["cached_tokens"].(float64) <= 0 || a["hit_rate"].(float64) <= 0.3 {
			t.Errorf("%s: cached %v tokens, hit rate %v: the later turns' cached prompt was not read", dial, a["cached_tokens"], a["hit_rate"])
		}
		outcomes := a["outcomes"].(map[string]any)
		if outcomes["as_predicted"].(float64) < 2 {
			t.Errorf("%s: outcomes %v, want the warm turns as predicted", dial, outcomes)
		}
	}
	after := scrape(t, admin, series)
	for _, kind := range []string{"prompt", "cached"} {
		key := fmt.Sprintf("%s{kind=%q}", series, kind)
		if after[key] <= before[key] {
			t.Errorf("%s did not rise", key)
		}
	}
}

// Reading answers changes no byte of them and holds none back: the
// upstream writes each event only once the client has read the one
// before, and the client gets exactly what the upstream sent.
func TestUsageHandlerPassesStreamsThrough(t *testing.T) {
	next := make(chan struct{})
	var sent bytes.Buffer
	events := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"lo \\\"prompt_tokens\\\": 9\"}}],\"usage\":null}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":300,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n",
		"data: [DONE]\n\n",
	}
	bs := newBackends(t, 1)
	bs[0].handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range events {
			io.WriteString(w, ev)
			sent.WriteString(ev)
			w.(http.Flusher).Flush()
			if i == len(events)-1 {
				break
			}
			select {
			case <-next: // the client has read this event
			case <-r.Context().Done():
				return true
			}
		}
		return true
	}
	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	prefix_cache_usage
	reverse_proxy %s {
		lb_policy prefix_cache
	}
}
`, port, bs[0].addr()))
	body := withStream(chat("sys", "stream please"), true)
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	var got bytes.Buffer
	for i, ev := range events {
		buf := make([]byte, len(ev))
		if _, err := io.ReadFull(rd, buf); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		got.Write(buf)
		if i < len(events)-1 {
			next <- struct{}{}
		}
	}
	rest, _ := io.ReadAll(rd)
	got.Write(rest)
	if !bytes.Equal(got.Bytes(), sent.Bytes()) {
		t.Errorf("client got\n%q\nupstream sent\n%q", got.Bytes(), sent.Bytes())
	}
	a := answersOf(t, admin)[bs[0].addr()]
	if a == nil || a["answers"] != 1.0 || a["prompt_tokens"] != 300.0 || a["cached_tokens"] != 0.0 {
		t.Errorf("answer stats %v, want one answer of 300 prompt tokens, 0 cached", a)
	}
}

// An engine that publishes a capacity far larger than it holds (here
// bytes_per_token overstates the simulated vLLM's 16k-token cache 16
// times), or none at all (its metrics endpoint is not found, as with an
// engine that publishes no capacity), is bounded by its answers: a
// conversation the index still believed held, that the engine had
// evicted, sets the engine's learned capacity, and an older conversation
// on that engine stops matching. Without prefix_cache_usage, the older
// one still matches.
func TestAnswersCorrectAnEngineCapacity(t *testing.T) {
	for _, tc := range []struct {
		name, usage, uri string
		published, learn bool
	}{
		{"published too large, with prefix_cache_usage", "prefix_cache_usage", "/metrics", true, true},
		{"published too large, without", "", "/metrics", true, false},
		{"none published, with prefix_cache_usage", "prefix_cache_usage", "/no-metrics-here", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fleet, _ := startSimulatedFleet(t, 2, 1024) // 16,384 tokens
			port := freePort(t)
			admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	%s
	reverse_proxy %s {
		lb_policy prefix_cache {
			min_match_ratio 0
			engine_metrics %s {
				interval 200ms
				timeout 200ms
				capacity on
				bytes_per_token 64
			}
		}
		header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}
		header_down X-PC-Upstream {http.reverse_proxy.upstream.hostport}
	}
}
`, port, tc.usage, strings.Join(fleet.Addrs(), " "), tc.uri))
			url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
			ask := func(body []byte) (string, string) { t.Helper(); return postRoute(t, url, body) }
			// Older conversations, then the one whose answer will teach.
			var older [][]byte
			holders := map[string][]int{}
			for i := range 8 {
				sys := words(fmt.Sprint("older-", i), 300)
				older = append(older, []byte(sys))
				_, up := ask(chat(sys, "first"))
				holders[up] = append(holders[up], i)
			}
			teacher := words("teacher", 300)
			_, h := ask(chat(teacher, "first"))
			if len(holders[h]) == 0 {
				t.Skipf("no older conversation landed on %s, the teacher's engine", h)
			}
			if tc.published {
				for _, addr := range fleet.Addrs() {
					waitEngine(t, admin, addr, func(map[string]any) bool {
						return capacityOf(t, admin, addr)["published"].(float64) > 0
					}, "scraping the published capacity")
				}
			}
			// New conversations until the teacher's engine was sent 512
			// chunks since (128 KiB of text, twice the age at which fleet
			// takes a miss as an eviction): its 16,384 tokens are long
			// evicted. How the flood splits between the engines depends
			// on their load as each request arrives.
			sent := func() float64 {
				c := capacityOf(t, admin, h)
				if c == nil {
					return 0
				}
				return c["sent"].(float64)
			}
			since := sent()
			for i := 0; sent()-since < 512; i++ {
				if i == 400 {
					t.Fatalf("%s was sent %v chunks in 400 new conversations, want 512", h, sent()-since)
				}
				ask(chat(words(fmt.Sprint("flood-", i), 300), "hello"))
			}
			if reason, up := ask(chat(teacher, "first", "answer", "second")); reason != "match" || up != h {
				t.Fatalf("the teacher's second turn: %s on %s, want a match on %s (nothing bounds the engine's capacity yet)", reason, up, h)
			}
			c := capacityOf(t, admin, h)
			if c == nil {
				t.Fatalf("no capacity stats for %s", h)
			}
			// The answer is learned from once Caddy has sent its last
			// byte, which the client may have read first.
			for deadline := time.Now().Add(5 * time.Second); tc.learn && c["learned"].(float64) == 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond) // polling the admin API, bounded by the deadline
				c = capacityOf(t, admin, h)
			}
			learned := c["learned"].(float64)
			if got := learned > 0; got != tc.learn {
				t.Fatalf("%s: learned capacity %v chunks; learned %v, want %v (capacity stats %v)", h, learned, got, tc.learn, c)
			}
			if tc.learn && c["chunks"] != learned {
				t.Errorf("%s: capacity %v chunks applied, want the learned %v (capacity stats %v)", h, c["chunks"], learned, c)
			}
			sys := string(older[holders[h][0]])
			reason, _ := ask(chat(sys, "first", "answer", "second"))
			if matched := reason == "match"; matched == tc.learn {
				t.Errorf("an older conversation on %s: reason %q after the teacher's answer; want a match only without learning", h, reason)
			}
		})
	}
}

// A client that stops reading a stream once it has [DONE], as OpenAI's
// SDKs do, may close its connection before the upstream's response has
// ended; Caddy's reverse_proxy then aborts the response (it panics with
// http.ErrAbortHandler), and the answer's usage, already read, still
// counts. Here the upstream holds its response open after [DONE] until
// Caddy cancels it, so every such answer goes through the abort.
func TestUsageCountsAStreamItsClientLeft(t *testing.T) {
	bs := newBackends(t, 1)
	bs[0].handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n")
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":300,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":120}}}\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // Caddy cancels once its client has left
		return true
	}
	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	prefix_cache_usage
	reverse_proxy %s {
		lb_policy prefix_cache
		flush_interval -1
	}
}
`, port, bs[0].addr()))
	const series = "caddy_prefix_cache_answer_tokens_total"
	before := scrape(t, admin, series)
	body := withStream(chat("sys", "stream, then leave"), true)
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && sc.Text() != "data: [DONE]" {
	}
	if sc.Text() != "data: [DONE]" {
		t.Fatalf("the stream ended before [DONE]: %v", sc.Err())
	}
	resp.Body.Close() // before the response's end: the connection closes

	deadline := time.Now().Add(10 * time.Second)
	for {
		a := answersOf(t, admin)[bs[0].addr()]
		if a != nil && a["answers"] == 1.0 {
			if a["prompt_tokens"] != 300.0 || a["cached_tokens"] != 120.0 {
				t.Errorf("answer stats %v, want 300 prompt tokens, 120 cached", a)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the answer of a stream its client left was not counted within 10s: answer stats %v", a)
		}
		time.Sleep(20 * time.Millisecond) // polling the admin API, bounded by the deadline
	}
	after := scrape(t, admin, series)
	for kind, want := range map[string]float64{"prompt": 300, "cached": 120} {
		key := fmt.Sprintf("%s{kind=%q}", series, kind)
		if got := after[key] - before[key]; got != want {
			t.Errorf("%s rose by %v, want %v", key, got, want)
		}
	}
}
