package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fastConfig is the default model with no simulated delays.
func fastConfig() Config {
	cfg := DefaultConfig()
	cfg.TimeScale = 0
	return cfg
}

// testEngine is an engine behind a real HTTP server.
type testEngine struct {
	*Engine
	url  string
	gate chan struct{} // nil unless gated
}

// startEngine starts an engine and its server, both stopped at the end of
// the test. If gated, the engine runs one step per receive from te.gate.
func startEngine(t *testing.T, cfg Config, gated bool) *testEngine {
	t.Helper()
	var gate chan struct{}
	if gated {
		gate = make(chan struct{})
	}
	e, err := newEngine(cfg, gate)
	if err != nil {
		t.Fatalf("newEngine(%+v) = %v", cfg, err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(func() {
		e.Close()
		srv.Close()
	})
	return &testEngine{Engine: e, url: srv.URL, gate: gate}
}

// waitFor blocks until cond holds for the engine's stats, woken by the
// engine's state changes; it fails the test after 10 s.
func (te *testEngine) waitFor(t *testing.T, what string, cond func(Stats) bool) Stats {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		te.mu.Lock()
		s := te.statsLocked()
		ch := te.changedLocked()
		te.mu.Unlock()
		if cond(s) {
			return s
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s; stats %+v", what, s)
		}
	}
}

// waitLocked blocks until cond, called with the engine locked, holds.
func (te *testEngine) waitLocked(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		te.mu.Lock()
		ok := cond()
		ch := te.changedLocked()
		te.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// stepUntil runs engine steps, one per gate receive, until done is closed.
func (te *testEngine) stepUntil(done <-chan struct{}) {
	for {
		select {
		case te.gate <- struct{}{}:
		case <-done:
			return
		}
	}
}

// post sends a JSON body and returns the response.
func post(t *testing.T, ctx context.Context, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

// Client-side view of the OpenAI API, as the openai client decodes it.
type apiUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *apiUsage) cached() int {
	if u == nil || u.PromptTokensDetails == nil {
		return -1
	}
	return u.PromptTokensDetails.CachedTokens
}

type apiChat struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *apiUsage `json:"usage"`
}

// doJSON posts body to path and decodes a 200 JSON response.
func doJSON(t *testing.T, te *testEngine, path string, body any) apiChat {
	t.Helper()
	out, err := tryJSON(te, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryJSON is doJSON for goroutines other than the test's.
func tryJSON(te *testEngine, path string, body any) (apiChat, error) {
	var out apiChat
	b, err := json.Marshal(body)
	if err != nil {
		return out, err
	}
	resp, err := http.Post(te.url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return out, fmt.Errorf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("POST %s = %d %s", path, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("POST %s: decoding %s: %v", path, raw, err)
	}
	return out, nil
}

// sseEvent is one server-sent event.
type sseEvent struct {
	event, data string
}

// readSSE parses a server-sent event stream per the HTML spec, as the
// openai and anthropic clients do: fields until a blank line, then dispatch.
// onEvent, if not nil, is called as each event arrives.
func readSSE(t *testing.T, r io.Reader, onEvent func(sseEvent)) []sseEvent {
	t.Helper()
	var events []sseEvent
	var cur sseEvent
	var data []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(data) > 0 || cur.event != "" {
				cur.data = strings.Join(data, "\n")
				events = append(events, cur)
				if onEvent != nil {
					onEvent(cur)
				}
			}
			cur, data = sseEvent{}, nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			data = append(data, value)
		case "event":
			cur.event = value
		case "":
			// comment
		default:
			t.Errorf("unexpected SSE field %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading SSE: %v", err)
	}
	return events
}

// streamChat posts a streaming request and decodes its chunks; it reports
// whether the stream ended with [DONE].
func streamChat(t *testing.T, te *testEngine, path string, body map[string]any) (chunks []apiChat, done bool) {
	t.Helper()
	body["stream"] = true
	resp := post(t, context.Background(), te.url+path, body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s = %d %s", path, resp.StatusCode, raw)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", ct)
	}
	for _, ev := range readSSE(t, resp.Body, nil) {
		if done {
			t.Errorf("event after [DONE]: %q", ev.data)
		}
		if ev.data == "[DONE]" {
			done = true
			continue
		}
		var c apiChat
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("chunk %q: %v", ev.data, err)
		}
		chunks = append(chunks, c)
	}
	return chunks, done
}

// words returns n distinct-looking three-letter words, each one token with
// its leading space, derived from seed.
func words(seed string, n int) string {
	var b strings.Builder
	h := saltSeed(seed)
	for i := range n {
		h = mix64(h + uint64(i))
		b.WriteByte(' ')
		for k := range 3 {
			b.WriteByte(byte('a' + (h>>(8*k))%26))
		}
	}
	return b.String()
}

// tokenIDs returns n token ids starting at first.
func tokenIDs(first, n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = first + i
	}
	return ids
}

func chatBody(maxTokens int, msgs ...string) map[string]any {
	roles := []string{"system", "user", "assistant"}
	var m []map[string]any
	for i, text := range msgs {
		role := roles[min(i, 1)]
		if i > 1 && i%2 == 0 {
			role = roles[2]
		}
		m = append(m, map[string]any{"role": role, "content": text})
	}
	return map[string]any{"model": "m", "messages": m, "max_tokens": maxTokens}
}
