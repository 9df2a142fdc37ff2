package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
)

// TestDynamoLogitUpstream replays the cost cases of Dynamo's selector
// tests (ai-dynamo/dynamo at 07a6c9ce3bb096cfaf353fe69ee578e105c6a512,
// lib/kv-router/src/scheduling/selector/default.rs): the expected values
// and winners are upstream's.
func TestDynamoLogitUpstream(t *testing.T) {
	def := dynamoWeights{overlapCredit: 1, prefillLoadScale: 1}
	tests := []struct {
		name                                                          string
		w                                                             dynamoWeights
		isl, cached, overlap, activePrefill, active, additional, reqs int
		want                                                          float64
	}{
		// test_worker_logit_clamps_non_decode_overlap_credit: raw (16+0+96)/16 = 7 blocks,
		// less 6 cached, x 2, plus 2 + 3 decode blocks.
		{"clamps non-decode overlap credit", dynamoWeights{overlapCredit: 1, prefillLoadScale: 2}, 64, 96, 6, 16, 2, 3, 0, 7},
		// test_worker_logit_can_charge_active_requests
		{"active requests, default weight", def, 0, 0, 0, 0, 100, 0, 4, 100},
		{"active requests, weight 32", dynamoWeights{overlapCredit: 1, prefillLoadScale: 1, activeRequestBlock: 32}, 0, 0, 0, 0, 100, 0, 4, 228},
		// test_overlap_credit_above_one_can_prefer_colocated_worker: warm 4 cached of 8, 5 active; cold 8.
		{"warm worker, credit 1", def, 128, 64, 4, 0, 5, 0, 0, 9},
		{"cold worker", def, 128, 0, 0, 0, 0, 0, 0, 8},
		{"warm worker, credit 1.5", dynamoWeights{overlapCredit: 1.5, prefillLoadScale: 1}, 128, 64, 4, 0, 5, 0, 0, 7},
		// test_prefill_load_scale_applies_after_overlap_credits: scale 2.
		{"scale after credit, warm", dynamoWeights{overlapCredit: 1, prefillLoadScale: 2}, 64, 32, 2, 0, 3, 0, 0, 7},
		{"scale after credit, cold", dynamoWeights{overlapCredit: 1, prefillLoadScale: 2}, 64, 0, 0, 0, 0, 0, 0, 8},
		// The queued prefill tokens count (worked from worker_logit).
		{"queued prefill", def, 64, 0, 0, 160, 0, 4, 1, 18}, // (160+64)/16 + 4
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dynamoLogit(tt.w, 16, tt.isl, tt.cached, tt.overlap, tt.activePrefill, tt.active, tt.additional, tt.reqs); got != tt.want {
				t.Errorf("dynamoLogit(%+v, isl %d, cached %d, overlap %d, prefill %d, active %d, +%d, %d reqs) = %v, want %v",
					tt.w, tt.isl, tt.cached, tt.overlap, tt.activePrefill, tt.active, tt.additional, tt.reqs, got, tt.want)
			}
		})
	}
}

func TestArgmin(t *testing.T) {
	costs := []float64{3, 1, 2, 1}
	if got := argmin(costs, func(int) int { return 0 }); got != 3 {
		t.Errorf("argmin(%v, always replace) = %d, want 3", costs, got)
	}
	if got := argmin(costs, func(n int) int { return n - 1 }); got != 1 {
		t.Errorf("argmin(%v, never replace) = %d, want 1", costs, got)
	}
}

func TestActiveLoad(t *testing.T) {
	a := newActiveLoad()
	a.add(0, []uint64{1, 2, 3}, 40)
	a.add(0, []uint64{1, 2, 4}, 8) // shares a two-block prefix
	tests := []struct {
		name                                  string
		worker                                int
		seq                                   []uint64
		prefill, active, additional, requests int
	}{
		{"shared prefix counted once", 0, []uint64{1, 2, 5}, 48, 4, 1, 2},
		{"nothing shared", 0, []uint64{9, 2}, 48, 4, 2, 2}, // prefix membership: 2 is active, but not after 9
		{"idle worker", 1, []uint64{1, 2}, 0, 0, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, act, add, n := a.projection(tt.worker, tt.seq)
			if p != tt.prefill || act != tt.active || add != tt.additional || n != tt.requests {
				t.Errorf("projection(%d, %v) = %d, %d, %d, %d, want %d, %d, %d, %d", tt.worker, tt.seq, p, act, add, n, tt.prefill, tt.active, tt.additional, tt.requests)
			}
		})
	}
	a.prefillDone(0, 40)
	a.remove(0, []uint64{1, 2, 3})
	if p, act, _, n := a.projection(0, nil); p != 8 || act != 3 || n != 1 {
		t.Errorf("after one request's prefill and end: %d prefill tokens, %d blocks, %d requests, want 8, 3, 1", p, act, n)
	}
}

func TestKVEventIndexer(t *testing.T) {
	tok := func(first int) []uint32 { // two blocks of 4 tokens
		out := make([]uint32, 8)
		for i := range out {
			out[i] = uint32(first + i)
		}
		return out
	}
	seq := dynamoSeqHashes(nil, append(tok(0), tok(100)...), 4)
	x := newKVEventIndexer()
	if !x.stored(0, nil, []uint64{11, 12}, tok(0), 4) {
		t.Fatal("stored a first run: rejected")
	}
	parent := uint64(12)
	if !x.stored(0, &parent, []uint64{13, 14}, tok(100), 4) {
		t.Fatal("stored a continuation: rejected")
	}
	unknown := uint64(99)
	if x.stored(1, &unknown, []uint64{21}, tok(0)[:4], 4) {
		t.Errorf("stored with an unknown parent: accepted")
	}
	tests := []struct {
		name   string
		worker int
		seq    []uint64
		want   int
	}{
		{"all four", 0, seq, 4},
		{"other worker", 1, seq, 0},
		{"a different first block", 0, dynamoSeqHashes(nil, tok(1), 4), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := x.overlap(tt.seq, tt.worker, time.Time{}); got != tt.want {
				t.Errorf("overlap(worker %d) = %d, want %d", tt.worker, got, tt.want)
			}
		})
	}
	x.removed(0, []uint64{12}) // the engine evicted the second block
	if got := x.overlap(seq, 0, time.Time{}); got != 1 {
		t.Errorf("after removing block 2, overlap = %d, want 1 (a prefix stops at the gap)", got)
	}
	x.cleared(0)
	if got := x.overlap(seq, 0, time.Time{}); got != 0 {
		t.Errorf("after AllBlocksCleared, overlap = %d, want 0", got)
	}
}

func TestApproxIndexer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	x := newApproxIndexer(2 * time.Minute)
	x.record([]uint64{1, 2, 3}, 0, t0)
	x.record([]uint64{1, 2}, 1, t0.Add(time.Minute))
	tests := []struct {
		name   string
		hashes []uint64
		worker int
		at     time.Duration
		want   int
	}{
		{"full", []uint64{1, 2, 3, 4}, 0, 0, 3},
		{"leading run only", []uint64{1, 9, 3}, 0, 0, 1},
		{"other worker", []uint64{1, 2, 3}, 1, time.Minute, 2},
		{"expired after the ttl", []uint64{1, 2, 3}, 0, 2 * time.Minute, 0},
		{"just before the ttl", []uint64{1, 2, 3}, 0, 2*time.Minute - 1, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := x.overlap(tt.hashes, tt.worker, t0.Add(tt.at)); got != tt.want {
				t.Errorf("overlap(%v, worker %d, t0+%v) = %d, want %d", tt.hashes, tt.worker, tt.at, got, tt.want)
			}
		})
	}
}

// engineUpstream is a simulated engine with KV events behind an HTTP
// server, and its pool entry.
func engineUpstream(t *testing.T, kvBlocks int) (*httptest.Server, *reverseproxy.Upstream) {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	cfg.KVBlocks = kvBlocks
	cfg.KVEvents = true
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(func() { e.Close(); srv.Close() })
	return srv, &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: strings.TrimPrefix(srv.URL, "http://")}
}

// complete sends a completion straight to an engine and returns its
// cached prompt tokens.
func complete(t *testing.T, url, prompt string) int {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":2}`, prompt)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Usage.PromptTokensDetails.CachedTokens
}

// TestDynamoKnowsEngineCache checks the promise of the KV event mode: fed
// the engine's events, the router's overlap for a prompt equals what the
// engine then serves from its cache, when the prompt is cached and after
// the engine evicted it.
func TestDynamoKnowsEngineCache(t *testing.T) {
	srv, up := engineUpstream(t, 64) // 1,024 tokens
	s := new(DynamoSelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	batches := make(chan struct{}, 4096)
	s.applied = func(string, kvBatch) { batches <- struct{}{} }
	pool := reverseproxy.UpstreamPool{up}

	prompt := strings.Repeat("the quick brown fox jumps ", 30)
	body := fmt.Sprintf(`{"model":"m","prompt":%q}`, prompt)
	tokens, err := engine.PromptTokens("/v1/completions", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	seq := dynamoSeqHashes(nil, tokens, DynamoBlockSize)
	overlap := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.events.overlap(seq, s.ids.id(up.Dial), time.Time{})
	}
	waitOverlap := func(what string, want int) {
		t.Helper()
		timeout := time.NewTimer(10 * time.Second)
		defer timeout.Stop()
		for overlap() != want {
			select {
			case <-batches:
			case <-timeout.C:
				t.Fatalf("%s: overlap %d, want %d", what, overlap(), want)
			}
		}
	}

	// The first Select subscribes; then the engine caches the prompt.
	s.Select(pool, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body)), nil)
	complete(t, srv.URL, prompt)
	waitOverlap("after the prompt ran", len(seq))
	if got := complete(t, srv.URL, prompt); got != len(seq)*DynamoBlockSize {
		t.Errorf("the engine served %d cached tokens, the router believed %d blocks", got, len(seq))
	}
	for i := range 4 { // 4 x ~400 tokens evict it from 1,024
		complete(t, srv.URL, strings.Repeat(fmt.Sprintf("filler %d text ", i), 90))
	}
	waitOverlap("after the prompt was evicted", 0)
	if got := complete(t, srv.URL, prompt); got != 0 {
		t.Errorf("the engine served %d cached tokens, the router believed none", got)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gaps != 0 || s.rejected != 0 {
		t.Errorf("%d batches missed, %d stored events rejected, want 0", s.gaps, s.rejected)
	}
}

// TestDynamoPrefillReleasedAtFirstByte checks the load accounting: the
// chosen worker owes the request's uncached prompt tokens until the first
// response byte, and its blocks until the request ends.
func TestDynamoPrefillReleasedAtFirstByte(t *testing.T) {
	for _, s := range []*dynamoCore{&new(DynamoApproxSelection).dynamoCore, &new(DynamoSelection).dynamoCore} {
		if err := s.provision(newTestContext(t)); err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{}, 1)
		s.released = func() { released <- struct{}{} }
		finish := make(chan struct{})
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/kv_events" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush() // the first token
			<-finish
		}))
		up := &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: strings.TrimPrefix(backend.URL, "http://")}
		ctx, cancel := context.WithCancel(context.Background())
		r := chatRequest(strings.Repeat("a long shared system prompt ", 20), "q").WithContext(ctx)
		if got := s.Select(reverseproxy.UpstreamPool{up}, r, nil); got != up {
			t.Fatalf("Select = %v", got)
		}
		load := func() (int, int) {
			s.mu.Lock()
			defer s.mu.Unlock()
			p, active, _, _ := s.active.projection(s.ids.id(up.Dial), nil)
			return p, active
		}
		if p, active := load(); p == 0 || active == 0 {
			t.Errorf("after Select: %d prefill tokens, %d blocks, want both positive", p, active)
		}
		out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, backend.URL+"/v1/chat/completions", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(out) // returns at the first byte
		if err != nil {
			t.Fatal(err)
		}
		if p, active := load(); p != 0 || active == 0 {
			t.Errorf("after the first byte: %d prefill tokens, %d blocks, want 0 and positive", p, active)
		}
		close(finish)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		<-released
		if p, active := load(); p != 0 || active != 0 {
			t.Errorf("after the end: %d prefill tokens, %d blocks, want 0", p, active)
		}
		backend.Close()
	}
}

func TestDynamoSelectUnreadableBody(t *testing.T) {
	s := new(DynamoSelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	pool := testPool(2)
	r := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
	if got := s.Select(pool, r, nil); got == nil {
		t.Errorf("Select(GET) = nil, want the least-loaded fallback")
	}
}

func TestDynamoOverlapWeightMapping(t *testing.T) {
	zero, two := 0.0, 2.0
	tests := []struct {
		name   string
		weight *float64
		want   dynamoWeights
	}{
		{"default", nil, dynamoWeights{overlapCredit: 1, prefillLoadScale: 1}},
		{"deprecated weight 2 sets the scale", &two, dynamoWeights{overlapCredit: 1, prefillLoadScale: 2}},
		{"deprecated weight 0 also drops the credit", &zero, dynamoWeights{overlapCredit: 0, prefillLoadScale: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &DynamoApproxSelection{dynamoCore{OverlapScoreWeight: tt.weight}}
			if err := s.Provision(newTestContext(t)); err != nil {
				t.Fatal(err)
			}
			if s.weights != tt.want {
				t.Errorf("weights = %+v, want %+v", s.weights, tt.want)
			}
		})
	}
}
