package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// wireEvent and wireBatch decode /kv_events as a subscriber does, from the
// wire format alone.
type wireEvent struct {
	Type        string   `json:"type"`
	BlockHashes []uint64 `json:"block_hashes"`
	Parent      *uint64  `json:"parent_block_hash"`
	TokenIDs    []uint32 `json:"token_ids"`
	BlockSize   int      `json:"block_size"`
}

type wireBatch struct {
	Seq    uint64      `json:"seq"`
	Events []wireEvent `json:"events"`
}

// subscribe reads te's /kv_events from start into a channel until the test
// ends.
func subscribe(t *testing.T, te *testEngine, start uint64) <-chan wireBatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/kv_events?start=%d", te.url, start), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /kv_events = %d", resp.StatusCode)
	}
	ch := make(chan wireBatch, 1024)
	go func() {
		defer resp.Body.Close()
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		for sc.Scan() {
			var b wireBatch
			if err := json.Unmarshal(sc.Bytes(), &b); err != nil {
				t.Errorf("batch %q: %v", sc.Bytes(), err)
				return
			}
			ch <- b
		}
	}()
	return ch
}

// receiveUpTo reads batches until one numbered last-1 arrives.
func receiveUpTo(t *testing.T, ch <-chan wireBatch, last uint64) []wireBatch {
	t.Helper()
	var got []wireBatch
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for len(got) == 0 || got[len(got)-1].Seq+1 < last {
		select {
		case b, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended after %d batches, want up to %d", len(got), last)
			}
			got = append(got, b)
		case <-timeout.C:
			t.Fatalf("timed out after %d batches, want up to %d", len(got), last)
		}
	}
	return got
}

// TestKVEventsReplayToCacheState checks the promise of kvevents.go: the
// batches are numbered without gaps, every BlockStored event's hashes are
// the engine's chained hashes of its tokens from its parent (as vLLM's
// hash_block_tokens chains them), and applying the stream in order gives
// exactly the set of prefixes the cache holds, evictions included.
func TestKVEventsReplayToCacheState(t *testing.T) {
	cfg := fastConfig()
	cfg.KVBlocks = 64 // 1,024 tokens: the prompts below evict each other
	cfg.KVEvents = true
	te := startEngine(t, cfg, false)
	ch := subscribe(t, te, 0)

	prompts := []string{
		words("a", 300), words("a", 300) + words("b", 100), words("c", 500),
		words("a", 300), words("d", 700), words("c", 500) + words("e", 50),
	}
	for _, p := range prompts {
		doJSON(t, te, "/v1/completions", map[string]any{"model": "m", "prompt": p, "max_tokens": 20})
	}
	te.mu.Lock()
	last := te.sched.events.next
	want := make([]uint64, 0, len(te.sched.pool.cached))
	for h := range te.sched.pool.cached {
		want = append(want, h)
	}
	te.mu.Unlock()

	held := map[uint64]bool{}
	removed := 0
	for i, b := range receiveUpTo(t, ch, last) {
		if b.Seq != uint64(i) {
			t.Fatalf("batch %d has seq %d, want %d (in order, no gap)", i, b.Seq, i)
		}
		for _, ev := range b.Events {
			switch ev.Type {
			case "BlockStored":
				if ev.BlockSize != cfg.BlockSize || len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
					t.Fatalf("BlockStored with %d hashes, %d tokens, block_size %d", len(ev.BlockHashes), len(ev.TokenIDs), ev.BlockSize)
				}
				parent := saltSeed("")
				if ev.Parent != nil {
					parent = *ev.Parent
					if !held[parent] {
						t.Errorf("BlockStored's parent %x is not cached", parent)
					}
				}
				for k, h := range ev.BlockHashes {
					if got := chainHash(parent, ev.TokenIDs[k*ev.BlockSize:(k+1)*ev.BlockSize]); got != h {
						t.Errorf("stored block %x: its tokens chain to %x", h, got)
					}
					if held[h] {
						t.Errorf("block %x stored twice without a removal", h)
					}
					held[h], parent = true, h
				}
			case "BlockRemoved":
				for _, h := range ev.BlockHashes {
					if !held[h] {
						t.Errorf("BlockRemoved of %x, which is not cached", h)
					}
					delete(held, h)
					removed++
				}
			default:
				t.Errorf("unexpected event %q", ev.Type)
			}
		}
	}
	if removed == 0 {
		t.Errorf("no BlockRemoved: the test should overflow the cache")
	}
	got := make([]uint64, 0, len(held))
	for h := range held {
		got = append(got, h)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("replayed events hold %d prefixes, the cache %d", len(got), len(want))
	}
}

// TestKVEventsResetAndReplay checks that /reset_prefix_cache publishes the
// evictions and that a subscriber starting from 0 after the fact gets the
// kept batches again.
func TestKVEventsResetAndReplay(t *testing.T) {
	cfg := fastConfig()
	cfg.KVEvents = true
	te := startEngine(t, cfg, false)
	doJSON(t, te, "/v1/completions", map[string]any{"model": "m", "prompt": words("x", 100), "max_tokens": 4})
	resp, err := http.Post(te.url+"/reset_prefix_cache", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	te.mu.Lock()
	last := te.sched.events.next
	te.mu.Unlock()
	stored, removed := 0, 0
	for _, b := range receiveUpTo(t, subscribe(t, te, 0), last) {
		for _, ev := range b.Events {
			switch ev.Type {
			case "BlockStored":
				stored += len(ev.BlockHashes)
			case "BlockRemoved":
				removed += len(ev.BlockHashes)
			}
		}
	}
	if stored == 0 || removed != stored {
		t.Errorf("after a request and a reset, %d blocks stored and %d removed, want equal and positive", stored, removed)
	}
}

func TestKVEventsOff(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	resp, err := http.Get(te.url + "/kv_events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /kv_events without KVEvents = %d, want 404", resp.StatusCode)
	}
}

// TestCacheConfigInfo checks vllm:cache_config_info against the form
// vLLM's PrometheusStatLogger.log_metrics_info writes (vllm/v1/metrics/
// loggers.py): labels from CacheConfig.metrics_info() as str() values,
// engine last, no model_name, value 1 written as "1.0" by
// prometheus_client; and that GIE/llm-d's extractor, which reads the
// block_size and num_gpu_blocks labels with strconv.Atoi, would find the
// engine's geometry.
func TestCacheConfigInfo(t *testing.T) {
	cfg := fastConfig()
	cfg.KVBlocks = 25000
	te := startEngine(t, cfg, false)
	resp, err := http.Get(te.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var line string
	for l := range strings.SplitSeq(string(raw), "\n") {
		if strings.HasPrefix(l, "vllm:cache_config_info{") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no vllm:cache_config_info sample in\n%s", raw)
	}
	if !strings.Contains(string(raw), "# TYPE vllm:cache_config_info gauge\n") {
		t.Errorf("vllm:cache_config_info is not typed gauge")
	}
	labels, value, _ := strings.Cut(strings.TrimPrefix(line, "vllm:cache_config_info{"), "} ")
	if value != "1.0" {
		t.Errorf("value %q, want 1.0", value)
	}
	got := map[string]string{}
	var order []string
	for kv := range strings.SplitSeq(labels, ",") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = strings.Trim(v, `"`)
		order = append(order, k)
	}
	for k, want := range map[string]string{"block_size": "16", "num_gpu_blocks": "25000", "enable_prefix_caching": "True", "num_cpu_blocks": "None", "engine": "0"} {
		if got[k] != want {
			t.Errorf("label %s = %q, want %q", k, got[k], want)
		}
	}
	if _, ok := got["model_name"]; ok {
		t.Errorf("vllm:cache_config_info has a model_name label; vLLM's has none")
	}
	if order[len(order)-1] != "engine" || order[0] != "block_size" {
		t.Errorf("labels in order %v, want block_size first and engine last", order)
	}
}

// TestPromptTokensMatchesUsage checks that PromptTokens tokenizes as the
// handlers do: as many tokens as the usage reports, for each API.
func TestPromptTokensMatchesUsage(t *testing.T) {
	te := startEngine(t, fastConfig(), false)
	tests := []struct {
		name, path string
		body       map[string]any
	}{
		{"chat", "/v1/chat/completions", chatBody(4, "You are terse."+words("s", 40), "Hello"+words("u", 30))},
		{"completions", "/v1/completions", map[string]any{"model": "m", "prompt": "Once" + words("p", 50), "max_tokens": 4}},
		{"token ids", "/v1/completions", map[string]any{"model": "m", "prompt": tokenIDs(5, 33), "max_tokens": 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := json.Marshal(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			tokens, err := PromptTokens(tt.path, raw)
			if err != nil {
				t.Fatalf("PromptTokens(%s) = %v", tt.path, err)
			}
			out := doJSON(t, te, tt.path, tt.body)
			if out.Usage == nil || out.Usage.PromptTokens != len(tokens) {
				t.Errorf("PromptTokens(%s) = %d tokens, the engine's usage %+v", tt.path, len(tokens), out.Usage)
			}
		})
	}
	if _, err := PromptTokens("/v1/models", []byte(`{}`)); err == nil {
		t.Errorf("PromptTokens(/v1/models) = nil error, want one")
	}
}
