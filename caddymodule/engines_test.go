package caddymodule_test

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
)

// metricsBackend is a real HTTP upstream that answers chat requests as
// backend does and serves /metrics as its metrics function says, so that
// a test can make an engine report any queue or fail in any way.
type metricsBackend struct {
	name    string
	srv     *httptest.Server
	chats   atomic.Int64
	scrapes atomic.Int64
	metrics atomic.Pointer[func(w http.ResponseWriter, r *http.Request)]
}

func newMetricsBackend(t *testing.T, name string) *metricsBackend {
	t.Helper()
	return startMetricsBackend(t, name, false)
}

// startMetricsBackend starts a metricsBackend, serving TLS with
// httptest's certificate when tls is set.
func startMetricsBackend(t *testing.T, name string, tls bool) *metricsBackend {
	t.Helper()
	b := &metricsBackend{name: name}
	b.setWaiting(0)
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			b.scrapes.Add(1)
			(*b.metrics.Load())(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		b.chats.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", b.name)
		fmt.Fprintf(w, `{"backend":%q,"bytes":%d}`, b.name, len(body))
	}))
	if tls {
		b.srv.StartTLS()
	} else {
		b.srv.Start()
	}
	t.Cleanup(b.srv.Close)
	return b
}

func (b *metricsBackend) addr() string { return b.srv.Listener.Addr().String() }

// setWaiting makes /metrics report n waiting requests, as vLLM does.
func (b *metricsBackend) setWaiting(n int) {
	b.serve(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"+
			"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"test-model\"} 0.0\n"+
			"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"test-model\"} %d.0\n", n)
	})
}

func (b *metricsBackend) serve(f func(w http.ResponseWriter, r *http.Request)) { b.metrics.Store(&f) }

func metricsSite(port int, bs []*metricsBackend, policyOptions string) string {
	var dials []string
	for _, b := range bs {
		dials = append(dials, b.addr())
	}
	return fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy prefix_cache {
			load_allowance 2
			%s
		}
		header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}
	}
}
`, port, strings.Join(dials, " "), policyOptions)
}

// upstreamField returns, for each upstream of every instance that has
// it, one object field of its admin stats (engine, capacity, answers).
func upstreamField(t *testing.T, admin, field string) map[string]map[string]any {
	t.Helper()
	resp, err := http.Get(admin + "/prefix_cache/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Instances []struct {
			Upstreams []map[string]any `json:"upstreams"`
		} `json:"instances"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, in := range st.Instances {
		for _, u := range in.Upstreams {
			if v, ok := u[field].(map[string]any); ok {
				out[u["dial"].(string)] = v
			}
		}
	}
	return out
}

// engineOf returns the engine stats the admin API shows for dial, and
// whether it shows any.
func engineOf(t *testing.T, admin, dial string) (map[string]any, bool) {
	t.Helper()
	e, ok := upstreamField(t, admin, "engine")[dial]
	return e, ok
}

// capacityOf returns the capacity stats the admin API shows for dial.
func capacityOf(t *testing.T, admin, dial string) map[string]any {
	t.Helper()
	return upstreamField(t, admin, "capacity")[dial]
}

// startSimulatedFleet starts n of the benchmark's simulated vLLM engines,
// answering at once (time scale 0), with kvBlocks blocks of KV cache each
// (0: the default), closed when the test ends. It returns their config.
func startSimulatedFleet(t *testing.T, n, kvBlocks int) (*engine.Fleet, engine.Config) {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	if kvBlocks > 0 {
		cfg.KVBlocks = kvBlocks
	}
	fleet, err := engine.StartFleet(n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Close)
	return fleet, cfg
}

// waitScrapeOK waits for caddy_prefix_cache_engine_scrape_ok of dial to
// read want: it is set just after the scrape's counter and sample.
func waitScrapeOK(t *testing.T, admin, dial string, want float64) {
	t.Helper()
	key := fmt.Sprintf("caddy_prefix_cache_engine_scrape_ok{upstream=%q}", dial)
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, found := scrape(t, admin, key)[key]
		if found && v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (found %v), want %v", key, v, found, want)
		}
		time.Sleep(10 * time.Millisecond) // polling Caddy's metrics, bounded by the deadline
	}
}

// waitEngine polls the admin API until ok accepts dial's engine stats.
func waitEngine(t *testing.T, admin, dial string, ok func(map[string]any) bool, why string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, found := engineOf(t, admin, dial)
		if found && ok(e) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: engine stats of %s are %v", why, dial, e)
		}
		time.Sleep(10 * time.Millisecond) // polling the admin API, bounded by the deadline
	}
}

// A conversation's holder whose engine reports a long queue of other
// clients' requests is over the bound, and the next turn spills; with
// the queue signal off (or without engine_metrics) the turn stays, as
// this Caddy alone has nothing in flight there.
func TestEngineQueueJoinsTheBound(t *testing.T) {
	for _, tc := range []struct {
		name, options string
		spill         bool
	}{
		{"queue on", "engine_metrics {\n\t\t\t\tinterval 200ms\n\t\t\t\ttimeout 200ms\n\t\t\t\tqueue on\n\t\t\t}", true},
		{"queue off", "engine_metrics {\n\t\t\t\tinterval 200ms\n\t\t\t\ttimeout 200ms\n\t\t\t\tqueue off\n\t\t\t}", false},
		{"queue off by default", "engine_metrics {\n\t\t\t\tinterval 200ms\n\t\t\t\ttimeout 200ms\n\t\t\t}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := []*metricsBackend{newMetricsBackend(t, "a"), newMetricsBackend(t, "b")}
			port := freePort(t)
			admin := startCaddyAdmin(t, metricsSite(port, bs, tc.options))
			url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

			system := words("engine-queue", 300)
			holder, _ := post(t, http.DefaultClient, url, chat(system, "first turn"))
			var h *metricsBackend
			for _, b := range bs {
				if b.name == holder {
					h = b
				}
			}
			if h == nil {
				t.Fatalf("answered by %q, not a backend", holder)
			}
			h.setWaiting(40)
			waitEngine(t, admin, h.addr(), func(e map[string]any) bool { return e["waiting"] == 40.0 }, "after the queue grew")

			got, _ := post(t, http.DefaultClient, url, chat(system, "first turn", "an answer", "second turn"))
			if spilled := got != holder; spilled != tc.spill {
				t.Errorf("second turn went to %s (holder %s): spilled %v, want %v", got, holder, spilled, tc.spill)
			}

			h.setWaiting(0)
			waitEngine(t, admin, h.addr(), func(e map[string]any) bool { return e["waiting"] == 0.0 }, "after the queue drained")
			got, _ = post(t, http.DefaultClient, url, chat(system, "first turn", "an answer", "second turn", "another answer", "third turn"))
			if got != holder && !tc.spill {
				t.Errorf("third turn went to %s, want the holder %s", got, holder)
			}
		})
	}
}

// Scrapes that fail in every way (refused, hanging past the timeout, an
// error status, garbage, a body past the size bound, another program's
// metrics) never fail or delay a request: each
// is counted by its outcome, and the upstreams route as without
// engine_metrics.
func TestEngineScrapeFailuresRouteAsBefore(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	kinds := map[string]func(w http.ResponseWriter, r *http.Request){
		"timeout": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		},
		"status": func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "nope", http.StatusServiceUnavailable) },
		"garbled": func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\" 3\n")
		},
		"too_large": func(w http.ResponseWriter, _ *http.Request) {
			// More lines of a family read than any engine writes (256
			// KiB); the 4 MiB bound on the body has its own test.
			line := "vllm:num_requests_waiting{model_name=\"" + strings.Repeat("m", 1000) + "\"} 1\n"
			for range 300 {
				io.WriteString(w, line)
			}
		},
		"unknown_engine": func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "# TYPE go_goroutines gauge\ngo_goroutines 12\n")
		},
	}
	var bs []*metricsBackend
	for kind, f := range kinds {
		b := newMetricsBackend(t, kind)
		b.serve(f)
		bs = append(bs, b)
	}
	port := freePort(t)
	admin := startCaddyAdmin(t, metricsSite(port, bs, "engine_metrics {\n\t\t\t\tinterval 200ms\n\t\t\t\ttimeout 200ms\n\t\t\t}"))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	client := &http.Client{Timeout: 5 * time.Second}

	const series = "caddy_prefix_cache_engine_scrapes_total"
	before := scrape(t, admin, series)
	// Every conversation keeps its holder while the scrapes fail.
	holders := map[int]string{}
	for round := range 3 {
		for c := range 8 {
			system := words(fmt.Sprintf("failing-scrapes-%d", c), 300)
			turns := []string{"first"}
			for r := 0; r < round; r++ {
				turns = append(turns, "answer", fmt.Sprintf("turn %d", r+2))
			}
			got, _ := post(t, client, url, chat(system, turns...))
			if round == 0 {
				holders[c] = got
			} else if got != holders[c] {
				t.Errorf("conversation %d, round %d: went to %s, its holder is %s", c, round, got, holders[c])
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for kind := range kinds {
		key := fmt.Sprintf("%s{outcome=%q}", series, kind)
		for scrape(t, admin, series)[key] <= before[key] {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not rise", key)
			}
			time.Sleep(10 * time.Millisecond) // polling Caddy's metrics, bounded by the deadline
		}
	}
	for _, b := range bs {
		if _, found := engineOf(t, admin, b.addr()); found {
			t.Errorf("%s: the admin API shows an engine sample from a failed scrape", b.name)
		}
		waitScrapeOK(t, admin, b.addr(), 0)
	}
}

// The benchmark's simulated vLLM engine is scraped as a vLLM engine:
// its queue and the KV capacity of vllm:cache_config_info.
func TestEngineMetricsOfTheSimulatedVLLM(t *testing.T) {
	fleet, cfg := startSimulatedFleet(t, 2, 0)
	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy prefix_cache {
			engine_metrics {
				interval 200ms
				timeout 200ms
			}
		}
	}
}
`, port, strings.Join(fleet.Addrs(), " ")))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	resp, err := http.Post(url, "application/json", strings.NewReader(string(chat("simulated", "hello"))))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, addr := range fleet.Addrs() {
		e := waitEngine(t, admin, addr, func(e map[string]any) bool { return e["engine"] == "vllm" }, "scraping the simulated engine")
		if want := float64(cfg.KVBlocks * cfg.BlockSize); e["kv_tokens"] != want {
			t.Errorf("%s: kv_tokens %v, want %v", addr, e["kv_tokens"], want)
		}
		if e["running"] != 0.0 || e["waiting"] != 0.0 {
			t.Errorf("%s: running %v, waiting %v on an idle engine, want 0 and 0", addr, e["running"], e["waiting"])
		}
		waitScrapeOK(t, admin, addr, 1)
	}
}

// Scrapes go through the reverse_proxy's transport, as Caddy's active
// health checks do: to an engine served over TLS they speak TLS with the
// transport's trust pool, and they carry engine_metrics' header fields.
// (A timeout of a second: a TLS handshake under the race detector on a
// loaded machine takes tens of milliseconds.)
func TestEngineMetricsOverTheTransportsTLS(t *testing.T) {
	b := startMetricsBackend(t, "tls", true)
	inner := *b.metrics.Load()
	b.serve(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer engine-token" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		inner(w, r)
	})
	caFile := filepath.Join(t.TempDir(), "engine-ca.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.srv.Certificate().Raw})
	if err := os.WriteFile(caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy prefix_cache {
			engine_metrics {
				interval 1s
				timeout 1s
				header Authorization "Bearer engine-token"
			}
		}
		transport http {
			tls_trust_pool file %s
		}
	}
}
`, port, b.addr(), caFile))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	post(t, http.DefaultClient, url, chat("over tls", "hello"))
	waitEngine(t, admin, b.addr(), func(e map[string]any) bool { return e["engine"] == "vllm" }, "scraping over TLS with a header")
}

// With capacity on, the index holds per engine no more than the engine's
// KV cache (the simulated vLLM's cache_config_info): a conversation whose
// holder has since been sent more new prompts than its cache holds is no
// longer a match there, as the engine evicted it. With capacity off the
// index still believes the holder has it.
func TestEngineCapacityForgetsWhatTheEngineEvicted(t *testing.T) {
	for _, tc := range []struct {
		name, option string
		evicted      bool
	}{
		{"capacity on", "capacity on", true},
		{"capacity off", "capacity off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fleet, _ := startSimulatedFleet(t, 2, 128) // 2,048 tokens: 8 KiB of text, 32 chunks
			port := freePort(t)
			admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy prefix_cache {
			min_match_ratio 0
			engine_metrics {
				interval 200ms
				timeout 200ms
				%s
			}
		}
		header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}
	}
}
`, port, strings.Join(fleet.Addrs(), " "), tc.option))
			url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
			system := words("kept-or-evicted", 300) // ~3 KiB: a dozen chunks
			if got := postReason(t, url, chat(system, "first")); got != "cold" {
				t.Fatalf("first turn: reason %q, want cold", got)
			}
			for _, addr := range fleet.Addrs() {
				waitEngine(t, admin, addr, func(e map[string]any) bool {
					return e["engine"] == "vllm" && (!tc.evicted || capacityOf(t, admin, addr)["chunks"] == 32.0)
				}, "scraping the engines' capacity")
			}
			if got := postReason(t, url, chat(system, "first", "answer", "second")); got != "match" {
				t.Fatalf("second turn, before the flood: reason %q, want match", got)
			}
			// Sixty new conversations: about thirty per engine, each a dozen
			// chunks, far past 32.
			for i := range 60 {
				postReason(t, url, chat(words(fmt.Sprint("flood-", i), 300), "hello"))
			}
			got := postReason(t, url, chat(system, "first", "answer", "second", "answer", "third"))
			if evicted := got != "match"; evicted != tc.evicted {
				t.Errorf("third turn after the flood: reason %q; evicted %v, want %v", got, evicted, tc.evicted)
			}
		})
	}
}

// A scrape's body is read to 4 MiB at most, whatever it holds: past it,
// the scrape is too_large and nothing of it counts.
func TestEngineScrapeBodyBound(t *testing.T) {
	b := newMetricsBackend(t, "huge")
	b.serve(func(w http.ResponseWriter, _ *http.Request) {
		line := strings.Repeat("x", 1<<10) + " 1\n" // no family read: only the size bound stops it
		for range 5 << 10 {                         // 5 MiB
			if _, err := io.WriteString(w, line); err != nil {
				return
			}
		}
	})
	port := freePort(t)
	// A timeout far above what reading 4 MiB takes, even under the race
	// detector on a loaded machine: the outcome is the size, not time.
	admin := startCaddyAdmin(t, metricsSite(port, []*metricsBackend{b}, "engine_metrics {\n\t\t\t\tinterval 5s\n\t\t\t\ttimeout 5s\n\t\t\t}"))
	post(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), chat("huge", "hello"))
	const key = `caddy_prefix_cache_engine_scrapes_total{outcome="too_large"}`
	before := scrape(t, admin, key)[key]
	deadline := time.Now().Add(20 * time.Second)
	for scrape(t, admin, key)[key] <= before {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not rise", key)
		}
		time.Sleep(20 * time.Millisecond) // polling Caddy's metrics, bounded by the deadline
	}
	if _, found := engineOf(t, admin, b.addr()); found {
		t.Error("the admin API shows an engine sample from an oversized scrape")
	}
}

// Each engine's prefill speed is measured from its own counters, as
// vLLM publishes them: prompt tokens less prefix-cache hits, over the
// prefill time histogram's sum. Two engines that compute 20,000 tokens
// per scrape, in 0.5 s and in 0.05 s, are shown at 40,000 and 400,000
// tokens per second (with prefill on, the backlog runs at these speeds).
func TestEnginePrefillSpeedFromTheEnginesCounters(t *testing.T) {
	seconds := map[string]float64{"slow": 0.5, "fast": 0.05}
	var bs []*metricsBackend
	for _, name := range []string{"slow", "fast"} {
		b := newMetricsBackend(t, name)
		per := seconds[name]
		b.serve(func(w http.ResponseWriter, _ *http.Request) {
			k := float64(b.scrapes.Load())
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0\n"+
				"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0.0\n"+
				"# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} %v\n"+
				"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} %v\n"+
				"# TYPE vllm:request_prefill_time_seconds histogram\n"+
				"vllm:request_prefill_time_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} %v\n"+
				"vllm:request_prefill_time_seconds_count{engine=\"0\",model_name=\"m\"} %v\n"+
				"vllm:request_prefill_time_seconds_sum{engine=\"0\",model_name=\"m\"} %v\n",
				40000*k, 20000*k, k, k, per*k)
		})
		bs = append(bs, b)
	}
	port := freePort(t)
	admin := startCaddyAdmin(t, metricsSite(port, bs, "engine_metrics {\n\t\t\t\tinterval 100ms\n\t\t\t\ttimeout 100ms\n\t\t\t\tprefill on\n\t\t\t}"))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	// Routing to both makes both known to the index, which keeps the
	// samples of the upstreams it knows.
	for i := 0; len(upstreamField(t, admin, "engine")) < 2; i++ {
		if i == 200 {
			t.Fatal("200 conversations did not reach both upstreams")
		}
		post(t, http.DefaultClient, url, chat(fmt.Sprint("conversation ", i), "hello"))
	}
	for _, b := range bs {
		want := 20000 / seconds[b.name]
		e := waitEngine(t, admin, b.addr(), func(e map[string]any) bool {
			return e["prefill_tokens_per_second"].(float64) > 0
		}, "measuring prefill")
		if got := e["prefill_tokens_per_second"].(float64); math.Abs(got-want) > want*1e-9 {
			t.Errorf("%s: prefill_tokens_per_second %v, want %v", b.name, got, want)
		}
	}
}

// A config's upstreams are in the admin stats, and their engines
// scraped, from its start, not from its first request.
func TestEngineScrapesBeforeTheFirstRequest(t *testing.T) {
	b := newMetricsBackend(t, "idle")
	b.setWaiting(3)
	port := freePort(t)
	admin := startCaddyAdmin(t, metricsSite(port, []*metricsBackend{b}, "engine_metrics {\n\t\t\t\tinterval 100ms\n\t\t\t}"))
	waitEngine(t, admin, b.addr(), func(e map[string]any) bool { return e["waiting"] == 3.0 }, "a scrape before any request")
	if n := b.chats.Load(); n != 0 {
		t.Fatalf("%d chat requests reached the engine, want none", n)
	}
}
