package engine

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"zero", func(c *Config) { *c = Config{} }, "model must not be empty"},
		{"block size", func(c *Config) { c.BlockSize = 0 }, "block_size must be at least 1, got 0"},
		{"kv blocks", func(c *Config) { c.KVBlocks = -1 }, "kv_blocks must be at least 1, got -1"},
		{"max num seqs", func(c *Config) { c.MaxNumSeqs = 0 }, "max_num_seqs must be at least 1, got 0"},
		{"budget", func(c *Config) { c.MaxNumBatchedTokens = 0 }, "max_num_batched_tokens must be at least 1, got 0"},
		{"negative cost", func(c *Config) { c.PrefillPerToken = -1 }, "prefill_per_token must not be negative, got -1ns"},
		{"time scale", func(c *Config) { c.TimeScale = -0.5 }, "time_scale must be a finite number at least 0, got -0.5"},
		{"max tokens", func(c *Config) { c.DefaultMaxTokens = 0 }, "default_max_tokens must be at least 1, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(&cfg)
			e, err := New(cfg)
			if err == nil {
				e.Close()
				t.Fatalf("New(%+v) = nil error, want %q", cfg, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("New(%+v) = %q, want %q", cfg, err, tt.want)
			}
		})
	}
}

func TestChatCompletion(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	body := chatBody(5, "You are terse.", "Say something.")
	got := doJSON(t, te, "/v1/chat/completions", body)
	if got.Object != "chat.completion" || got.Model != "m" || !strings.HasPrefix(got.ID, "chatcmpl-") {
		t.Errorf("response header fields = %q %q %q", got.Object, got.Model, got.ID)
	}
	if len(got.Choices) != 1 {
		t.Fatalf("choices = %d, want 1", len(got.Choices))
	}
	c := got.Choices[0]
	if c.Message.Role != "assistant" || c.FinishReason == nil || *c.FinishReason != "length" {
		t.Errorf("choice = %+v, want assistant, finish_reason length", c)
	}
	if n := len(tokenize(nil, c.Message.Content)); n != 5 {
		t.Errorf("content %q is %d tokens, want 5", c.Message.Content, n)
	}
	prompt := "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nSay something.<|im_end|>\n<|im_start|>assistant\n"
	u := got.Usage
	if want := len(tokenize(nil, prompt)); u.PromptTokens != want || u.CompletionTokens != 5 || u.TotalTokens != want+5 || u.cached() != 0 {
		t.Errorf("usage = %+v cached %d, want prompt %d, completion 5, total %d, cached 0", u, u.cached(), want, want+5)
	}

	// Deterministic: the same prompt gives the same text.
	again := doJSON(t, te, "/v1/chat/completions", body)
	if again.Choices[0].Message.Content != c.Message.Content {
		t.Errorf("second answer %q, first %q", again.Choices[0].Message.Content, c.Message.Content)
	}
}

func TestChatStreaming(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	const n = 7
	want := doJSON(t, te, "/v1/chat/completions", chatBody(n, "sys", "hello"))
	for _, includeUsage := range []bool{false, true} {
		body := chatBody(n, "sys", "hello")
		body["stream_options"] = map[string]any{"include_usage": includeUsage}
		chunks, done := streamChat(t, te, "/v1/chat/completions", body)
		if !done {
			t.Errorf("include_usage=%v: stream did not end with [DONE]", includeUsage)
		}
		if len(chunks) < 3 {
			t.Fatalf("include_usage=%v: %d chunks, want role, content..., finish", includeUsage, len(chunks))
		}
		if d := chunks[0].Choices[0].Delta; d.Role != "assistant" || d.Content == nil || *d.Content != "" {
			t.Errorf("first chunk delta = %+v, want role assistant, empty content", d)
		}
		var text strings.Builder
		var finish string
		var usage *apiUsage
		for i, c := range chunks {
			if c.Object != "chat.completion.chunk" || c.ID != chunks[0].ID {
				t.Errorf("chunk %d: object %q id %q", i, c.Object, c.ID)
			}
			if c.Usage != nil {
				if len(c.Choices) != 0 || i != len(chunks)-1 {
					t.Errorf("usage chunk %d of %d has %d choices, want last with none", i, len(chunks), len(c.Choices))
				}
				usage = c.Usage
				continue
			}
			ch := c.Choices[0]
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if text.String() != want.Choices[0].Message.Content {
			t.Errorf("streamed text %q, non-streamed %q", text.String(), want.Choices[0].Message.Content)
		}
		if finish != "length" {
			t.Errorf("finish_reason = %q, want length", finish)
		}
		switch {
		case includeUsage && usage == nil:
			t.Errorf("include_usage: no usage chunk")
		case includeUsage && (usage.PromptTokens != want.Usage.PromptTokens || usage.CompletionTokens != n || usage.cached() < 0):
			t.Errorf("usage chunk = %+v, want prompt %d, completion %d, cached tokens present", usage, want.Usage.PromptTokens, n)
		case !includeUsage && usage != nil:
			t.Errorf("usage chunk without include_usage")
		}
	}
}

func TestCompletions(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	got := doJSON(t, te, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 4})
	if got.Object != "text_completion" || len(got.Choices) != 1 || *got.Choices[0].FinishReason != "length" {
		t.Fatalf("response = %+v", got)
	}
	text := got.Choices[0].Text
	if !strings.HasPrefix(text, " ") || len(tokenize(nil, text)) != 4 {
		t.Errorf("text %q: want 4 tokens with a leading space", text)
	}
	if got.Usage.PromptTokens != len(tokenize(nil, "Once upon a time")) || got.Usage.CompletionTokens != 4 {
		t.Errorf("usage = %+v", got.Usage)
	}
	// The continuation tokenizes to the generated tokens: prompt + answer
	// hits the blocks generated.
	ids := doJSON(t, te, "/v1/completions", map[string]any{"prompt": tokenIDs(1, 40), "max_tokens": 1})
	if ids.Usage.PromptTokens != 40 {
		t.Errorf("token-id prompt: prompt_tokens = %d, want 40", ids.Usage.PromptTokens)
	}
	nested := doJSON(t, te, "/v1/completions", map[string]any{"prompt": [][]int{tokenIDs(1, 40)}, "max_tokens": 1})
	if nested.Usage.cached() != 32 {
		t.Errorf("nested token-id prompt: cached = %d, want 32", nested.Usage.cached())
	}

	chunks, done := streamChat(t, te, "/v1/completions", map[string]any{
		"prompt": "Once upon a time", "max_tokens": 4, "stream_options": map[string]any{"include_usage": true},
	})
	var streamed strings.Builder
	for _, c := range chunks {
		for _, ch := range c.Choices {
			streamed.WriteString(ch.Text)
		}
	}
	if !done || streamed.String() != text || chunks[len(chunks)-1].Usage == nil {
		t.Errorf("stream: done %v, text %q (want %q), last chunk %+v", done, streamed.String(), text, chunks[len(chunks)-1])
	}
}

func TestBadRequests(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	tests := []struct {
		path, body string
		code       int
	}{
		{"/v1/chat/completions", `{`, 400},
		{"/v1/chat/completions", `{"messages":[]}`, 400},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":2}`, 400},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":7}]}`, 400},
		{"/v1/completions", `{"prompt":""}`, 400},
		{"/v1/completions", `{"prompt":["a","b"]}`, 400},
		{"/v1/messages", `{"messages":[]}`, 400},
	}
	for _, tt := range tests {
		resp, err := http.Post(te.url+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || !strings.Contains(string(raw), `"error"`) {
			t.Errorf("POST %s %s = %d %s, want %d with an error object", tt.path, tt.body, resp.StatusCode, raw, tt.code)
		}
	}
	resp, err := http.Get(te.url + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/chat/completions = %d, want 405", resp.StatusCode)
	}
}

func TestCachedTokensOnRepeat(t *testing.T) {
	tests := []struct {
		name         string
		promptTokens int
		wantCached   int
	}{
		{"partial last block", 40, 32},
		{"exact blocks", 48, 32}, // vLLM recomputes the last token, so the last block misses
		{"under one block", 15, 0},
		{"one block and one", 17, 16},
		{"long", 1000, 992},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			te := startEngine(t, fastConfig(), false)
			body := map[string]any{"prompt": tokenIDs(100, tt.promptTokens), "max_tokens": 2}
			first := doJSON(t, te, "/v1/completions", body)
			second := doJSON(t, te, "/v1/completions", body)
			if first.Usage.cached() != 0 || second.Usage.cached() != tt.wantCached {
				t.Errorf("cached tokens = %d then %d, want 0 then %d", first.Usage.cached(), second.Usage.cached(), tt.wantCached)
			}
			s := te.Stats()
			if s.PromptTokens != int64(2*tt.promptTokens) || s.CachedTokens != int64(tt.wantCached) {
				t.Errorf("Stats() prompt %d cached %d, want %d %d", s.PromptTokens, s.CachedTokens, 2*tt.promptTokens, tt.wantCached)
			}
		})
	}

	t.Run("chat", func(t *testing.T) {
		te := startEngine(t, fastConfig(), false)
		body := chatBody(3, "system prompt"+words("s", 100), "question"+words("q", 50))
		first := doJSON(t, te, "/v1/chat/completions", body)
		second := doJSON(t, te, "/v1/chat/completions", body)
		p := first.Usage.PromptTokens
		if want := (p - 1) / 16 * 16; second.Usage.cached() != want {
			t.Errorf("repeat of a %d-token chat: cached %d, want %d", p, second.Usage.cached(), want)
		}
		// Same system prompt, other question: the shared blocks hit.
		third := doJSON(t, te, "/v1/chat/completions", chatBody(3, "system prompt"+words("s", 100), "other"+words("o", 50)))
		if c := third.Usage.cached(); c < 96 || c >= p-50 {
			t.Errorf("shared system prompt: cached %d, want the system turn's blocks (96..%d)", c, p-50)
		}
	})
}

func TestMultiTurnHitsPreviousAnswer(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	sys, q1, q2 := "Be helpful."+words("sys", 30), "First question"+words("q1", 20), "And then?"
	turn1 := doJSON(t, te, "/v1/chat/completions", chatBody(40, sys, q1))
	answer := turn1.Choices[0].Message.Content
	turn2 := doJSON(t, te, "/v1/chat/completions", chatBody(8, sys, q1, answer, q2))

	p1, n1 := turn1.Usage.PromptTokens, turn1.Usage.CompletionTokens
	// The engine computed KV for the prompt and all but the last output
	// token; all full blocks of those hit.
	want := (p1 + n1 - 1) / 16 * 16
	if got := turn2.Usage.cached(); got != want {
		t.Errorf("turn 2 cached %d tokens, want %d (turn 1: prompt %d + answer %d - 1, in full blocks)", got, want, p1, n1)
	}
	if want <= p1/16*16 {
		t.Fatalf("test setup: the answer does not complete a block beyond the prompt (want %d, prompt %d)", want, p1)
	}
	// The follow-up's tokens extend the first turn's prompt and answer.
	prefix := tokenize(nil, "<|im_start|>system\n"+sys+"<|im_end|>\n<|im_start|>user\n"+q1+"<|im_end|>\n<|im_start|>assistant\n"+answer)
	if len(prefix) != p1+n1 {
		t.Errorf("prompt + answer retokenized to %d tokens, want %d + %d", len(prefix), p1, n1)
	}
}

func TestNaturalStopAndIgnoreEOS(t *testing.T) {
	cfg := fastConfig()
	cfg.MeanOutputTokens = 4
	te := startEngine(t, cfg, false)
	for i := range 5 {
		body := chatBody(100, "sys", "question"+words("x", i))
		stop := doJSON(t, te, "/v1/chat/completions", body)
		again := doJSON(t, te, "/v1/chat/completions", body)
		n := stop.Usage.CompletionTokens
		if *stop.Choices[0].FinishReason != "stop" || n < 1 || n > 8 {
			t.Errorf("without ignore_eos: finish %q after %d tokens, want stop within 1..8", *stop.Choices[0].FinishReason, n)
		}
		if again.Usage.CompletionTokens != n || again.Choices[0].Message.Content != stop.Choices[0].Message.Content {
			t.Errorf("natural length not deterministic: %d then %d tokens", n, again.Usage.CompletionTokens)
		}
		if got := len(tokenize(nil, stop.Choices[0].Message.Content)); got != n-1 {
			t.Errorf("content is %d tokens, want %d (EOS is not text)", got, n-1)
		}
		body["ignore_eos"] = true
		full := doJSON(t, te, "/v1/chat/completions", body)
		if *full.Choices[0].FinishReason != "length" || full.Usage.CompletionTokens != 100 {
			t.Errorf("ignore_eos: finish %q after %d tokens, want length after 100", *full.Choices[0].FinishReason, full.Usage.CompletionTokens)
		}
	}
}

func TestAnthropicMessages(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	body := map[string]any{
		"model":      "claude-sim",
		"max_tokens": 6,
		"system":     []map[string]any{{"type": "text", "text": "You are a tool user." + words("a", 40)}},
		"tools":      []map[string]any{{"name": "get", "input_schema": map[string]any{"type": "object"}}},
		"messages": []map[string]any{
			{"role": "user", "content": "Fetch it."},
			{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": "t1", "name": "get", "input": map[string]any{"k": 1}}}},
			{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "t1", "content": "result"}}},
		},
	}
	type message struct {
		Type       string `json:"type"`
		Role       string `json:"role"`
		Content    []struct{ Type, Text string }
		StopReason string `json:"stop_reason"`
		Usage      struct {
			InputTokens          int `json:"input_tokens"`
			OutputTokens         int `json:"output_tokens"`
			CacheReadInputTokens int `json:"cache_read_input_tokens"`
		} `json:"usage"`
	}
	var msgs [2]message
	for i := range msgs {
		resp := post(t, context.Background(), te.url+"/v1/messages", body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /v1/messages = %d", resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&msgs[i]); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	m := msgs[1]
	if m.Type != "message" || m.Role != "assistant" || len(m.Content) != 1 || m.StopReason != "max_tokens" || m.Usage.OutputTokens != 6 {
		t.Errorf("message = %+v", m)
	}
	prompt := msgs[0].Usage.InputTokens
	if msgs[0].Usage.CacheReadInputTokens != 0 || m.Usage.CacheReadInputTokens != (prompt-1)/16*16 ||
		m.Usage.InputTokens+m.Usage.CacheReadInputTokens != prompt {
		t.Errorf("usage first %+v, repeat %+v: want the repeat's %d prompt tokens split into cache reads and the rest", msgs[0].Usage, m.Usage, prompt)
	}

	body["stream"] = true
	resp := post(t, context.Background(), te.url+"/v1/messages", body)
	defer resp.Body.Close()
	var names []string
	var text strings.Builder
	for _, ev := range readSSE(t, resp.Body, nil) {
		names = append(names, ev.event)
		var d struct {
			Delta struct{ Text string } `json:"delta"`
		}
		json.Unmarshal([]byte(ev.data), &d)
		if ev.event == "content_block_delta" {
			text.WriteString(d.Delta.Text)
		}
	}
	got := strings.Join(names, " ")
	if !strings.HasPrefix(got, "message_start content_block_start content_block_delta") ||
		!strings.HasSuffix(got, "content_block_stop message_delta message_stop") {
		t.Errorf("event sequence %q", got)
	}
	if text.String() != m.Content[0].Text {
		t.Errorf("streamed %q, non-streamed %q", text.String(), m.Content[0].Text)
	}
}

func TestEvictionLRUTailFirst(t *testing.T) {
	cfg := fastConfig()
	cfg.KVBlocks = 13 // three 49-token requests (4 blocks each) and one block
	te := startEngine(t, cfg, false)
	prompt := func(i int) map[string]any {
		return map[string]any{"prompt": tokenIDs(1000*i, 49), "max_tokens": 1}
	}
	cached := func(i int) int { return doJSON(t, te, "/v1/completions", prompt(i)).Usage.cached() }
	// A, B, C fill the cache; D evicts the least recently freed blocks: A's,
	// tail first. Free queue before D: [free, A3, A2, A1, A0, B3, B2, ...].
	for i := range 4 {
		if c := cached(i); c != 0 {
			t.Fatalf("first request %d: cached %d, want 0", i, c)
		}
	}
	if c := cached(0); c != 16 {
		t.Errorf("A after eviction: cached %d, want 16 (A's head block outlives its tail)", c)
	}
	if c := cached(2); c != 48 {
		t.Errorf("C: cached %d, want 48 (more recent than A and B)", c)
	}
	// A's return took B's tail blocks and C's return B's head block.
	if c := cached(1); c != 0 {
		t.Errorf("B: cached %d, want 0 (least recently used)", c)
	}
	if s := te.Stats(); s.KVBlocksUsed != 0 || s.KVBlocksCached > cfg.KVBlocks {
		t.Errorf("Stats() = %+v: want no block pinned when idle", s)
	}
}

func TestPinnedBlocksSurviveChurn(t *testing.T) {
	cfg := fastConfig()
	cfg.KVBlocks = 60
	te := startEngine(t, cfg, true)
	// L holds 4 prompt blocks and decodes for far more steps than the test
	// runs, while other requests churn through the rest of the cache.
	long := map[string]any{"prompt": tokenIDs(1, 49), "max_tokens": 500}
	lDone := make(chan struct{})
	go func() {
		defer close(lDone)
		tryJSON(te, "/v1/completions", long) // 503 when the engine closes
	}()
	te.waitFor(t, "L queued", func(s Stats) bool { return s.Waiting == 1 })
	// oneStep runs a request that completes in one step, and one step.
	oneStep := func(body map[string]any) apiChat {
		t.Helper()
		n := te.Stats().Requests
		done := make(chan struct{})
		var got apiChat
		var err error
		go func() {
			defer close(done)
			got, err = tryJSON(te, "/v1/completions", body)
		}()
		te.waitFor(t, "request queued", func(s Stats) bool { return s.Requests == n+1 })
		te.gate <- struct{}{}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %v not done after one step", body)
		}
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i := range 30 { // 30 x 4 blocks = twice the free capacity
		got := oneStep(map[string]any{"prompt": tokenIDs(1000*(i+1), 49), "max_tokens": 1})
		if got.Usage.CompletionTokens != 1 {
			t.Fatalf("churn request %d: %+v", i, got)
		}
	}
	s := te.Stats()
	if s.Running != 1 || s.Finished != 30 || s.GeneratedTokens != 30+30 {
		t.Fatalf("after churn: %+v, want L running with 30 tokens and 30 finished", s)
	}
	// L's prompt blocks are pinned: an identical prompt hits all of them.
	if got := oneStep(map[string]any{"prompt": tokenIDs(1, 49), "max_tokens": 1}); got.Usage.cached() != 48 {
		t.Errorf("prompt of the running request: cached %d, want 48", got.Usage.cached())
	}
	te.Close()
	<-lDone
}

func TestQueueingWhenMaxNumSeqsFull(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxNumSeqs = 2
	te := startEngine(t, cfg, true)
	const n = 5
	var wg sync.WaitGroup
	results := make([]apiChat, n)
	for i := range n {
		wg.Go(func() {
			results[i], _ = tryJSON(te, "/v1/chat/completions", chatBody(3, "sys", "q"+words("q", i+1)))
		})
	}
	te.waitFor(t, "all queued", func(s Stats) bool { return s.Waiting == n })
	te.gate <- struct{}{} // one step admits MaxNumSeqs requests
	te.waitFor(t, "first step", func(s Stats) bool { return s.Steps == 1 })
	if s := te.Stats(); s.Running != 2 || s.Waiting != 3 {
		t.Errorf("after one step: running %d waiting %d, want 2 and 3", s.Running, s.Waiting)
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	te.stepUntil(all)
	for i, r := range results {
		if r.Usage == nil || r.Usage.CompletionTokens != 3 {
			t.Errorf("request %d: %+v, want 3 tokens", i, r)
		}
	}
	if s := te.Stats(); s.MaxRunning != 2 || s.MaxWaiting != n || s.Finished != n || s.Aborted != 0 {
		t.Errorf("Stats() = %+v, want max running 2, max waiting %d, all finished", s, n)
	}
}

func TestPreemptionWhenKVFull(t *testing.T) {
	cfg := fastConfig()
	cfg.KVBlocks = 6 // both prompts fit (3 blocks each), their outputs do not
	te := startEngine(t, cfg, true)
	var wg sync.WaitGroup
	results := make([]apiChat, 2)
	for i := range results {
		wg.Go(func() {
			results[i], _ = tryJSON(te, "/v1/completions", map[string]any{"prompt": tokenIDs(1000*i, 40), "max_tokens": 40})
		})
	}
	te.waitFor(t, "both queued", func(s Stats) bool { return s.Waiting == 2 })
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	te.stepUntil(all)
	for i, r := range results {
		if r.Usage == nil || r.Usage.CompletionTokens != 40 {
			t.Errorf("request %d: %+v, want 40 tokens", i, r)
		}
	}
	if s := te.Stats(); s.Preemptions == 0 || s.Finished != 2 || s.MaxRunning != 2 {
		t.Errorf("Stats() = %+v, want preemptions, both finished, both admitted at first", s)
	}
}

func TestOversizedRequestIsTruncated(t *testing.T) {
	cfg := fastConfig()
	cfg.KVBlocks = 4 // 64 tokens
	te := startEngine(t, cfg, false)
	got := doJSON(t, te, "/v1/completions", map[string]any{"prompt": tokenIDs(1, 200), "max_tokens": 10})
	if got.Usage.PromptTokens != 54 || got.Usage.CompletionTokens != 10 {
		t.Errorf("usage = %+v, want the prompt truncated to 64-10 = 54 tokens and 10 generated", got.Usage)
	}
	got = doJSON(t, te, "/v1/completions", map[string]any{"prompt": tokenIDs(1, 10), "max_tokens": 1000})
	if got.Usage.PromptTokens != 1 || got.Usage.CompletionTokens != 63 {
		t.Errorf("usage = %+v, want max tokens capped at 63 and the prompt at 1", got.Usage)
	}
}

func TestChunkedPrefill(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxNumBatchedTokens = 1024
	te := startEngine(t, cfg, false)
	doJSON(t, te, "/v1/completions", map[string]any{"prompt": tokenIDs(1, 3000), "max_tokens": 1})
	if s := te.Stats(); s.Steps != 3 || s.PrefillTokens != 3000 {
		t.Errorf("3000-token prompt with a 1024-token budget: %d steps, %d prefill tokens; want 3, 3000", s.Steps, s.PrefillTokens)
	}
}

func TestStepTime(t *testing.T) {
	cfg := DefaultConfig()
	tests := []struct {
		prefill, decodes int
		want             time.Duration
	}{
		{0, 1, 7050 * time.Microsecond},
		{0, 64, 10200 * time.Microsecond},
		{8000, 0, 487 * time.Millisecond},
		{8000, 64, 490200 * time.Microsecond}, // a miss slows every decoding sequence
	}
	for _, tt := range tests {
		if got := cfg.stepTime(tt.prefill, tt.decodes); got != tt.want {
			t.Errorf("stepTime(%d, %d) = %v, want %v", tt.prefill, tt.decodes, got, tt.want)
		}
	}
}

func TestTimeScale(t *testing.T) {
	for _, scale := range []float64{0, 0.5, 2} {
		cfg := DefaultConfig()
		cfg.StepBase = 10 * time.Millisecond
		cfg.PrefillPerToken, cfg.DecodePerSeq = 0, 0
		cfg.FrontendBase, cfg.FrontendPerToken = 5*time.Millisecond, 0
		cfg.TimeScale = scale
		te := startEngine(t, cfg, false)
		start := time.Now()
		doJSON(t, te, "/v1/completions", map[string]any{"prompt": "x", "max_tokens": 4})
		elapsed := time.Since(start)
		want := time.Duration(float64(4*10*time.Millisecond) * scale)
		if s := te.Stats(); s.BusyTime != want || s.Steps != 4 {
			t.Errorf("TimeScale %v: busy %v in %d steps, want %v in 4", scale, s.BusyTime, s.Steps, want)
		}
		if min := want + time.Duration(float64(5*time.Millisecond)*scale); elapsed < min {
			t.Errorf("TimeScale %v: request took %v, want at least %v", scale, elapsed, min)
		}
	}
}

func TestMetrics(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	before := scrape(t, te.url)
	for _, name := range []string{
		"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
		"vllm:time_to_first_token_seconds_count", `vllm:time_to_first_token_seconds_bucket{le="+Inf"}`,
	} {
		if _, ok := before[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	body := map[string]any{"prompt": tokenIDs(1, 100), "max_tokens": 3}
	doJSON(t, te, "/v1/completions", body)
	doJSON(t, te, "/v1/completions", body)
	after := scrape(t, te.url)
	moved := map[string]float64{
		"vllm:prefix_cache_queries_total":                      200,
		"vllm:prefix_cache_hits_total":                         96,
		"vllm:generation_tokens_total":                         6,
		"vllm:time_to_first_token_seconds_count":               2,
		`vllm:time_to_first_token_seconds_bucket{le="+Inf"}`:   2,
		"vllm:request_prefill_time_seconds_count":              2,
		`vllm:request_success_total{finished_reason="length"}`: 2,
	}
	for name, want := range moved {
		if got := after[name] - before[name]; got != want {
			t.Errorf("%s moved by %v, want %v", name, got, want)
		}
	}
	// A request's prefill runs from its first scheduling to its first
	// token, within its time to first token.
	prefill := after["vllm:request_prefill_time_seconds_sum"] - before["vllm:request_prefill_time_seconds_sum"]
	if ttft := after["vllm:time_to_first_token_seconds_sum"] - before["vllm:time_to_first_token_seconds_sum"]; prefill < 0 || prefill > ttft {
		t.Errorf("prefill time moved by %v, want from 0 to the time to first token's %v", prefill, ttft)
	}
	if after["vllm:num_requests_running"] != 0 || after["vllm:kv_cache_usage_perc"] != 0 {
		t.Errorf("idle engine: running %v, usage %v, want 0", after["vllm:num_requests_running"], after["vllm:kv_cache_usage_perc"])
	}
}

// scrape parses /metrics: sample name plus labels other than model_name and
// engine (which every sample must carry) -> value. It checks that every
// sample has HELP and TYPE lines.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type = %q", ct)
	}
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	typed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			typed[f[2]] = f[3]
			continue
		}
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "vllm:cache_config_info{") {
			continue // the info gauge has no model_name, as in vLLM (TestCacheConfigInfo)
		}
		nameLabels, value, ok := strings.Cut(line, " ")
		name, labels, _ := strings.Cut(strings.TrimSuffix(nameLabels, "}"), "{")
		if !ok || !strings.Contains(labels, `model_name="sim-llama-3-8b"`) || !strings.Contains(labels, `engine="0"`) {
			t.Errorf("bad sample line %q", line)
			continue
		}
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if typed[strings.TrimSuffix(name, suf)] == "histogram" {
				base = strings.TrimSuffix(name, suf)
			}
		}
		if typed[base] == "" {
			t.Errorf("sample %s has no TYPE line", name)
		}
		var extra []string
		for _, l := range strings.Split(labels, ",") {
			if !strings.HasPrefix(l, "model_name=") && !strings.HasPrefix(l, "engine=") {
				extra = append(extra, l)
			}
		}
		key := name
		if len(extra) > 0 {
			key += "{" + strings.Join(extra, ",") + "}"
		}
		var v float64
		if err := json.Unmarshal([]byte(value), &v); err != nil {
			t.Errorf("sample %q: value %q: %v", line, value, err)
		}
		out[key] = v
	}
	return out
}

func TestHealthAndModels(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	resp, err := http.Get(te.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /health = %d, want 200", resp.StatusCode)
	}
	resp, err = http.Get(te.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != DefaultModel || models.Data[0].MaxModelLen != DefaultKVBlocks*DefaultBlockSize {
		t.Errorf("GET /v1/models = %+v", models)
	}
}

func TestResetPrefixCache(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	body := map[string]any{"prompt": tokenIDs(1, 100), "max_tokens": 1}
	doJSON(t, te, "/v1/completions", body)
	resp := post(t, context.Background(), te.url+"/reset_prefix_cache", nil)
	resp.Body.Close()
	if got := doJSON(t, te, "/v1/completions", body).Usage.cached(); got != 0 {
		t.Errorf("after reset: cached %d, want 0", got)
	}
}

func TestClientDisconnectAborts(t *testing.T) {
	cfg := fastConfig()
	te := startEngine(t, cfg, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, te.url+"/v1/completions",
			strings.NewReader(`{"prompt":"hello","max_tokens":1000,"stream":true}`))
		r, err := http.DefaultClient.Do(req)
		if err == nil {
			resp <- r
		}
		close(resp)
	}()
	te.waitFor(t, "queued", func(s Stats) bool { return s.Waiting == 1 })
	te.gate <- struct{}{}
	te.gate <- struct{}{}
	if r := <-resp; r != nil {
		r.Body.Close()
	}
	cancel()
	te.waitLocked(t, "the handler's abort", func() bool {
		return len(te.sched.running) == 1 && te.sched.running[0].aborted
	})
	// The loop drops an aborted request at a step boundary: the end of the
	// step under way when the client left, or the next one's start. Run
	// steps until it has, not a fixed number of them.
	stepped := make(chan struct{})
	defer close(stepped)
	go te.stepUntil(stepped)
	s := te.waitFor(t, "abort", func(s Stats) bool { return s.Aborted == 1 })
	if s.Running != 0 || s.KVBlocksUsed != 0 {
		t.Errorf("after abort: %+v, want nothing running or pinned", s)
	}
}

func TestCloseStopsLoop(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StepBase = time.Millisecond
	cfg.FrontendBase = 0
	te := startEngine(t, cfg, false)
	resp := post(t, context.Background(), te.url+"/v1/chat/completions", map[string]any{
		"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 60000, "stream": true,
	})
	defer resp.Body.Close()
	first := make(chan struct{})
	var once sync.Once
	ended := make(chan []sseEvent)
	go func() {
		ended <- readSSE(t, resp.Body, func(sseEvent) { once.Do(func() { close(first) }) })
	}()
	<-first
	te.Close()
	select {
	case <-te.done:
	default:
		t.Fatal("Close returned before the loop exited")
	}
	events := <-ended // the handler returned: the stream ended
	if last := events[len(events)-1].data; last == "[DONE]" {
		t.Errorf("stream of a closed engine ended with [DONE]")
	}
	te.Close() // idempotent

	if s := te.Stats(); s.Aborted != 1 || s.Running != 0 || s.KVBlocksUsed != 0 {
		t.Errorf("Stats() after Close = %+v, want the request aborted and its blocks freed", s)
	}
	r, err := http.Get(te.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET /health after Close = %d, want 503", r.StatusCode)
	}
	r = post(t, context.Background(), te.url+"/v1/chat/completions", chatBody(1, "s", "u"))
	r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("request after Close = %d, want 503", r.StatusCode)
	}
}
