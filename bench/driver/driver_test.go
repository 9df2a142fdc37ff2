package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	"github.com/prefixcache/caddy-prefixcache/bench/workload"
	"github.com/prefixcache/caddy-prefixcache/caddymodule"
)

func TestExpandVars(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"a {$LISTEN} b", "a :1 b"},
		{"{$LISTEN::8080} {$UPSTREAMS:x:1 y:2}", ":1 u1 u2"},
		{"{$OTHER:keep} {$LISTEN}", "{$OTHER:keep} :1"},
		{"no vars", "no vars"},
		{"{$LISTEN", "{$LISTEN"},
	}
	vars := map[string]string{"LISTEN": ":1", "UPSTREAMS": "u1 u2"}
	for _, tt := range tests {
		if got := string(expandVars([]byte(tt.in), vars)); got != tt.want {
			t.Errorf("expandVars(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func readCaddyfile(t *testing.T) []byte {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAdaptCaddyfile(t *testing.T) {
	caddyfile := readCaddyfile(t)
	for _, name := range DefaultPolicyNames {
		t.Run(name, func(t *testing.T) {
			ps, err := ParsePolicies(name)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := AdaptCaddyfile(caddyfile, map[string]string{"LISTEN": "127.0.0.1:9", "UPSTREAMS": "127.0.0.1:1 127.0.0.1:2"}, ps[0], 1)
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			if admin, _ := cfg["admin"].(map[string]any); admin["disabled"] != true {
				t.Errorf("admin = %v, want disabled", cfg["admin"])
			}
			if !strings.Contains(string(raw), `"listen":[":9"]`) {
				t.Errorf("config does not listen on :9: %s", raw)
			}
			var handlers []map[string]any
			walk(cfg, func(m map[string]any) {
				if m["handler"] == "reverse_proxy" {
					handlers = append(handlers, m)
				}
			})
			found := len(handlers) > 0
			for _, h := range handlers {
				lb, _ := h["load_balancing"].(map[string]any)
				sp, _ := lb["selection_policy"].(map[string]any)
				if got := sp["policy"]; got != name {
					t.Errorf("selection policy = %v, want %s", got, name)
				}
				if ups, _ := h["upstreams"].([]any); len(ups) != 2 {
					t.Errorf("upstreams = %v, want 2", h["upstreams"])
				}
			}
			if !found {
				t.Errorf("no reverse_proxy handler in %s", raw)
			}
		})
	}
	if _, err := AdaptCaddyfile([]byte(":80 {\n\trespond ok\n}\n"), nil, Policy{Name: "x"}, 1); err == nil {
		t.Errorf("AdaptCaddyfile without reverse_proxy: no error")
	}
}

// prefix_cache's prefill_rate is in simulated time: the engines at time
// scale 0.2 prefill five times as fast in wall time, and so must the
// policy's estimate drain.
func TestAdaptCaddyfileScalesPrefillRate(t *testing.T) {
	caddyfile := readCaddyfile(t)
	own, _ := ParsePolicies("prefix_cache")
	given, err := ParseCustomPolicy(`pc={"policy":"prefix_cache","prefill_rate":1000}`)
	if err != nil {
		t.Fatal(err)
	}
	off, err := ParseCustomPolicy(`pc={"policy":"prefix_cache","prefill_rate":0}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		p    Policy
		want float64
	}{
		{"the Caddyfile's own, default rate", own[0], caddymodule.DefaultPrefillRate * 5},
		{"a given rate", given, 5000},
		{"off stays off", off, 0},
	} {
		raw, err := AdaptCaddyfile(caddyfile, map[string]string{"LISTEN": "127.0.0.1:9", "UPSTREAMS": "127.0.0.1:1"}, c.p, 0.2)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		var rates []any
		walk(cfg, func(m map[string]any) {
			if m["policy"] == "prefix_cache" {
				rates = append(rates, m["prefill_rate"])
			}
		})
		if len(rates) == 0 || slices.ContainsFunc(rates, func(r any) bool { return r != c.want }) {
			t.Errorf("%s: prefill_rate at time scale 0.2 = %v, want %v", c.name, rates, c.want)
		}
	}
}

// walk calls f on every JSON object under v.
func walk(v any, f func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		f(v)
		for _, c := range v {
			walk(c, f)
		}
	case []any:
		for _, c := range v {
			walk(c, f)
		}
	}
}

func TestParsePolicies(t *testing.T) {
	ps, err := ParsePolicies("round_robin, prefix_cache")
	if err != nil || len(ps) != 2 || ps[0].Name != "round_robin" || ps[1].Name != "prefix_cache" || ps[1].Selection != nil {
		t.Errorf("ParsePolicies(round_robin, prefix_cache) = %v, %v", ps, err)
	}
	for _, bad := range []string{"", "weighted", "random,nope"} {
		if _, err := ParsePolicies(bad); err == nil {
			t.Errorf("ParsePolicies(%q): no error", bad)
		}
	}
	p, err := ParseCustomPolicy(`pc={"policy":"prefix_cache","min_match":4096}`)
	if err != nil || p.Name != "pc" {
		t.Errorf("ParseCustomPolicy = %v, %v", p, err)
	}
	for _, bad := range []string{"pc", `pc={"min_match":1}`, "pc={", `={"policy":"x"}`} {
		if _, err := ParseCustomPolicy(bad); err == nil {
			t.Errorf("ParseCustomPolicy(%q): no error", bad)
		}
	}
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(ds, 0.5)
	want := Percentiles{P50: 0.1, P90: 0.18, P99: 0.198}
	if got != want {
		t.Errorf("percentiles(1..100 ms, 0.5) = %+v, want %+v", got, want)
	}
	if got := percentiles(nil, 1); got != (Percentiles{}) {
		t.Errorf("percentiles(nil) = %+v", got)
	}
}

func TestLoadFigures(t *testing.T) {
	samples := [][]int{{0, 0}, {10, 30}, {-1, 4}, {40, 0}}
	engines := make([]EngineLoad, 2)
	maxIn, mean, over := loadFigures(samples, engines, 1.25, 16)
	// Row {40, 0}: mean 20, bound 41, not over; row {10, 30}: bound 41.
	if maxIn != 40 || over != 0 {
		t.Errorf("loadFigures max %d over %d, want 40 and 0", maxIn, over)
	}
	if want := 84.0 / 7; mean != want {
		t.Errorf("loadFigures mean = %v, want %v", mean, want)
	}
	if engines[0].MaxInFlight != 40 || engines[1].MaxInFlight != 30 || engines[0].MeanInFlight != 50.0/3 {
		t.Errorf("engines = %+v", engines)
	}
	_, _, over = loadFigures([][]int{{40, 0}}, make([]EngineLoad, 2), 1.25, 0)
	if over != 1 {
		t.Errorf("loadFigures({40, 0}) with no allowance: over = %d, want 1", over)
	}
}

func TestAdmissions(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	rec := func(up string, sent, e2e int) Record { return Record{Upstream: up, Sent: ms(sent), E2E: ms(e2e)} }
	ups := []string{"a", "b"}
	// Three overlapping requests on a while b is idle: with factor 1 and
	// no allowance the bound is ceil((sum+1)/2): 1, 1, 2; the second and
	// third exceed it.
	recs := []Record{rec("a", 0, 100), rec("a", 10, 100), rec("a", 20, 100), rec("b", 200, 10), rec("x", 0, 1)}
	if got := admissions(recs, ups, 1, 0); got != 2 {
		t.Errorf("admissions(3 on a) = %d, want 2", got)
	}
	if got := admissions(recs, ups, 1, 2); got != 0 {
		t.Errorf("admissions with allowance 2 = %d, want 0", got)
	}
	// Sequential requests never overlap.
	seq := []Record{rec("a", 0, 10), rec("a", 10, 10), rec("a", 20, 10)}
	if got := admissions(seq, ups, 1, 0); got != 0 {
		t.Errorf("admissions(sequential) = %d, want 0", got)
	}
}

func TestCheck(t *testing.T) {
	good := func() *Result {
		return &Result{Workload: "w", Bound: &Bound{PromptTokens: 10, HitRate: 0.5}, Runs: []*Run{
			{Policy: "round_robin", Requests: 3, PromptTokens: 10, HitRate: 0.1, TTFT: Percentiles{P50: 0.1}, OutputTPS: 1},
			{Policy: "prefix_cache", Requests: 3, PromptTokens: 10, HitRate: 0.4, TTFT: Percentiles{P50: 0.1}, OutputTPS: 1},
		}}
	}
	if err := Check(good()); err != nil {
		t.Errorf("Check(good) = %v", err)
	}
	tests := []struct {
		name   string
		mutate func(r *Result)
	}{
		{"errors", func(r *Result) { r.Runs[0].Errors = 1 }},
		{"no requests", func(r *Result) { r.Runs[1].Requests = 0 }},
		{"hit rate above 1", func(r *Result) { r.Runs[0].HitRate = 1.5 }},
		{"no prefix_cache", func(r *Result) { r.Runs = r.Runs[:1] }},
		{"prefix_cache without hits", func(r *Result) { r.Runs[1].HitRate = 0 }},
		{"bad bound", func(r *Result) { r.Bound.HitRate = -1 }},
		{"no TTFT", func(r *Result) { r.Runs[0].TTFT.P50 = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			tt.mutate(r)
			if err := Check(r); err == nil {
				t.Errorf("Check(%s) = nil, want an error", tt.name)
			}
		})
	}
}

func TestStream(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		wantErr string
		answer  string
	}{
		{"ok", 200, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
			"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
			"data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n" +
			"data: [DONE]\n\n", "", "hi there"},
		{"no done", 200, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", "without [DONE]", ""},
		{"no usage", 200, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", "no usage", ""},
		{"status", 503, "busy", "status 503: busy", ""},
		{"garbage", 200, "data: {nope\n\n", "decoding chunk", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get(SessionHeader) != "s1" {
					t.Errorf("session header = %q", r.Header.Get(SessionHeader))
				}
				w.Header().Set(UpstreamHeader, "up:1")
				w.Header().Set(ReasonHeader, "match")
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			defer srv.Close()
			var rec Record
			answer := stream(context.Background(), srv.Client(), srv.URL, "s1", []byte("{}"), time.Now(), &rec)
			if tt.wantErr != "" {
				if !strings.Contains(rec.Err, tt.wantErr) {
					t.Errorf("stream() error = %q, want %q", rec.Err, tt.wantErr)
				}
				return
			}
			if rec.Err != "" || answer != tt.answer || rec.PromptTokens != 100 || rec.CachedTokens != 64 || rec.OutputTokens != 2 ||
				rec.TTFT <= 0 || rec.E2E < rec.TTFT || rec.Upstream != "up:1" || rec.Reason != "match" {
				t.Errorf("stream() = %q, %+v", answer, rec)
			}
		})
	}
}

// TestTokensPerByte checks that the workloads' synthetic text has the
// token count the engine's tokenizer gives it, so that workload lengths
// mean what they say.
func TestTokensPerByte(t *testing.T) {
	e, err := engine.New(fastEngine(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompt := func(text string) int {
		body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 1, "messages": []map[string]string{{"role": "user", "content": text}}})
		_, p, _, err := complete(context.Background(), e, body)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := prompt("")
	for _, n := range []int{1, 100, 1000} {
		if got := prompt(workload.Text(n, 9)) - base; got != n {
			t.Errorf("Text(%d) is %d tokens", n, got)
		}
	}
	if got := prompt(workload.MooncakeText([]int64{1, 2, 3}, 1300)) - base; got < 1299 || got > 1300 {
		t.Errorf("MooncakeText of 1300 tokens is %d tokens", got)
	}
}

func fastEngine(blocks int) engine.Config {
	cfg := engine.DefaultConfig()
	cfg.KVBlocks = blocks
	cfg.TimeScale = 0
	return cfg
}

func TestUpperBound(t *testing.T) {
	// Every request repeats one of two prompts: all but the first of each
	// hit, up to the partial last block.
	repeat, err := workload.SharedPrefix{Groups: 1, PromptsPerGroup: 2, SystemTokens: 500, QuestionTokens: 100, OutputTokens: 4, Requests: 20, Seed: 1}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	// No two requests share more than the chat template's opening (20
	// draws from 100,000 groups do not repeat with this seed).
	unique, err := workload.SharedPrefix{Groups: 100000, PromptsPerGroup: 1, SystemTokens: 500, QuestionTokens: 100, OutputTokens: 4, Requests: 20, Seed: 1}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	// Conversations whose later turns extend earlier ones, answers
	// included.
	chat, err := workload.Chat{Conversations: 5, Apps: 5, SystemTokens: 200, UserTokens: 50, OutputTokens: 32, MinTurns: 4, MaxTurns: 4, Seed: 1}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		w        *workload.Workload
		min, max float64
	}{
		{"repeated prompts", repeat, 0.85, 0.95},
		{"unique prompts", unique, 0, 0.05},
		// Turn k holds k-1 earlier turns of ~90 tokens plus the system
		// prompt: (3 x 290 + 90 + 180 + 270) / (4 x 290 + 90 x 6) ~ 0.6.
		{"chat", chat, 0.55, 0.75},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.w.Model = "m"
			b, err := UpperBound(context.Background(), tt.w, fastEngine(1))
			if err != nil {
				t.Fatal(err)
			}
			if b.HitRate < tt.min || b.HitRate > tt.max {
				t.Errorf("UpperBound(%s) = %.3f, want in [%v, %v]", tt.name, b.HitRate, tt.min, tt.max)
			}
		})
	}
}

func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Caddy and engines for a few seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results, err := Smoke(ctx, readCaddyfile(t), nil)
	if err != nil {
		t.Fatalf("Smoke() = %v", err)
	}
	if len(results) != 2 {
		t.Fatalf("Smoke() = %d results, want 2", len(results))
	}
	for _, r := range results {
		for _, run := range r.Runs {
			served := 0
			for _, e := range run.Engines {
				served += e.Requests
			}
			if served != run.Requests {
				t.Errorf("%s/%s: engines served %d of %d requests by the upstream header", r.Workload, run.Policy, served, run.Requests)
			}
			if run.Policy == "prefix_cache" && len(run.Reasons) == 0 {
				t.Errorf("%s/prefix_cache: no reasons in the responses' %s header", r.Workload, ReasonHeader)
			}
			if run.Policy == "round_robin" && len(run.Reasons) != 0 {
				t.Errorf("%s/round_robin: reasons %v", r.Workload, run.Reasons)
			}
		}
	}
}

// engine_metrics' scrape interval and timeout are wall time: at time
// scale 0.2 the engines live five times as fast, and so must the scrapes
// come, so that a sample is as fresh against the engines as in
// production. The defaults are filled in first.
func TestAdaptCaddyfileScalesEngineMetrics(t *testing.T) {
	caddyfile := readCaddyfile(t)
	for _, c := range []struct {
		name, spec        string
		interval, timeout int64
	}{
		{"defaults", `pc={"policy":"prefix_cache","engine_metrics":{}}`, int64(200 * time.Millisecond), int64(200 * time.Millisecond)},
		{"given", `pc={"policy":"prefix_cache","engine_metrics":{"interval":"2s","timeout":500000000}}`, int64(400 * time.Millisecond), int64(100 * time.Millisecond)},
		{"at least 10ms", `pc={"policy":"prefix_cache","engine_metrics":{"interval":"20ms","timeout":"20ms"}}`, int64(10 * time.Millisecond), int64(4 * time.Millisecond)},
	} {
		p, err := ParseCustomPolicy(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := AdaptCaddyfile(caddyfile, map[string]string{"LISTEN": "127.0.0.1:9", "UPSTREAMS": "127.0.0.1:1"}, p, 0.2)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		found := 0
		walk(cfg, func(m map[string]any) {
			if em, ok := m["engine_metrics"].(map[string]any); ok {
				found++
				if em["interval"] != float64(c.interval) || em["timeout"] != float64(c.timeout) {
					t.Errorf("%s: interval %v, timeout %v; want %d and %d", c.name, em["interval"], em["timeout"], c.interval, c.timeout)
				}
			}
		})
		if found == 0 {
			t.Errorf("%s: no engine_metrics in the adapted config", c.name)
		}
	}
}

// The edges' load reports come as often against the engines' clock as in
// production: sync_load_interval (100 ms by default) times the time scale.
func TestAdaptCaddyfileScalesSyncLoadInterval(t *testing.T) {
	caddyfile := readCaddyfile(t)
	own, _ := ParsePolicies("prefix_cache")
	given, err := ParseCustomPolicy(`pc={"policy":"prefix_cache","sync_load_interval":"400ms"}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		p    Policy
		want time.Duration
	}{
		{"the default", own[0], 50 * time.Millisecond},
		{"a given interval", given, 200 * time.Millisecond},
	} {
		raw, err := AdaptCaddyfile(caddyfile, map[string]string{"LISTEN": "127.0.0.1:9", "UPSTREAMS": "127.0.0.1:1"}, c.p, 0.5)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		var got []any
		walk(cfg, func(m map[string]any) {
			if m["policy"] == "prefix_cache" {
				got = append(got, m["sync_load_interval"])
			}
		})
		if len(got) == 0 || slices.ContainsFunc(got, func(v any) bool { return v != float64(c.want) }) {
			t.Errorf("%s: sync_load_interval at time scale 0.5 = %v, want %d", c.name, got, c.want)
		}
	}
}

// With Usage, every reverse_proxy has prefix_cache_usage right before it.
func TestAdaptCaddyfileInsertsUsage(t *testing.T) {
	caddyfile := readCaddyfile(t)
	own, _ := ParsePolicies("prefix_cache")
	p := own[0]
	p.Usage = true
	raw, err := AdaptCaddyfile(caddyfile, map[string]string{"LISTEN": "127.0.0.1:9", "UPSTREAMS": "127.0.0.1:1"}, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	proxies, preceded := 0, 0
	walk(cfg, func(m map[string]any) {
		handle, _ := m["handle"].([]any)
		for i, h := range handle {
			if hm, _ := h.(map[string]any); hm["handler"] == "reverse_proxy" {
				proxies++
				if prev, _ := handle[max(i-1, 0)].(map[string]any); i > 0 && prev["handler"] == "prefix_cache_usage" {
					preceded++
				}
			}
		}
	})
	if proxies == 0 || preceded != proxies {
		t.Errorf("%d of %d reverse_proxy handlers have prefix_cache_usage before them, want all", preceded, proxies)
	}
	if err := caddy.Validate(mustConfig(t, raw)); err != nil {
		t.Errorf("the config with prefix_cache_usage does not load: %v", err)
	}
}

func mustConfig(t *testing.T, raw []byte) *caddy.Config {
	t.Helper()
	var c caddy.Config
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}
