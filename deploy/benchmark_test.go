package deploy

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	"github.com/prefixcache/caddy-prefixcache/bench/workload"
)

// benchCaddyfile is the benchmark's edge: prefix_cache in front of the
// engines, and a metrics handler for Prometheus on the address %s (the
// benchmark turns Caddy's admin API off).
const benchCaddyfile = `http://{$LISTEN} {
	reverse_proxy {$UPSTREAMS} {
		lb_policy prefix_cache
		lb_retries 2
		flush_interval -1
	}
}

http://%s {
	metrics
}
`

const benchJob = "bench"

// benchPanelTolerance is how far the hit-rate panel may read from the
// benchmark's figure. Both count the same answers' tokens: with one edge,
// rate() extrapolates the cached and the prompt counter by the same
// scrape times, so their ratio is the benchmark's up to rounding.
const benchPanelTolerance = 0.002

// The dashboard's hit-rate panel against the benchmark's own figure:
// bench/driver's Benchmark runs prefix_cache on a shared-prefix workload
// through a real Caddy (in this process, as the benchmark runs one edge)
// in front of three simulated engines, and reports the run's hit rate
// from its client's records (Run.HitRate: the answers' cached_tokens over
// their prompt_tokens). A real Prometheus scrapes that Caddy during the
// run, with deploy/prometheus's rules; the panel's query, on the same
// answers as Caddy's prefix_cache_usage counted them, must read the same.
func TestHitRatePanelMatchesBenchmark(t *testing.T) {
	promBin := lookTool(t, "prometheus", "prometheus")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	ports, err := driver.ReservePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr, promListen, idleListen := ports[0], ports[1], ports[2]
	caddyfile := []byte(fmt.Sprintf(benchCaddyfile, metricsAddr))
	policy := driver.Policy{Name: "prefix_cache", Usage: true}
	ecfg := engine.DefaultConfig()

	// Before and after the run the same Caddy serves the metrics, idle,
	// so that Prometheus holds the counters before the first answer and
	// after the last (the module's counters live as long as the process,
	// across configs). The benchmark's own config replaces it meanwhile,
	// on the same metrics address.
	idle, err := driver.AdaptCaddyfile(caddyfile, map[string]string{"LISTEN": idleListen, "UPSTREAMS": "127.0.0.1:1"}, policy, ecfg.TimeScale)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(idle, true); err != nil {
		t.Fatalf("loading the idle Caddy: %v", err)
	}
	t.Cleanup(func() { caddy.Stop() })
	prom := startPrometheus(t, ctx, promBin, promListen, benchJob, []string{metricsAddr})
	before := fmt.Sprintf(`caddy_prefix_cache_answer_tokens_total{job=%q,kind="prompt"}`, benchJob)
	waitQuery(t, prom, before, "Prometheus scraping the counters before the run")
	s, err := prom.query(before)
	if err != nil {
		t.Fatal(err)
	}
	base := s[0].Value

	w, err := workload.SharedPrefix{
		Groups: 8, PromptsPerGroup: 20, SystemTokens: 600, QuestionTokens: 200,
		OutputTokens: 8, Requests: 600, Seed: 1,
	}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	w.Model = ecfg.Model
	res, err := driver.Benchmark(ctx, driver.Config{
		Engines:   3,
		Engine:    ecfg,
		Caddyfile: caddyfile,
		Policies:  []driver.Policy{policy},
		QPS:       []float64{60},
		NoBound:   true,
	}, w)
	if err != nil {
		t.Fatal(err)
	}
	run := res.Runs[0]
	t.Logf("benchmark: %d requests, %d errors, %d prompt tokens, %d cached: hit rate %.4f",
		run.Requests, run.Errors, run.PromptTokens, run.CachedTokens, run.HitRate)
	if run.Errors > 0 {
		t.Fatalf("the benchmark's run had %d errors (%s): the edge counted answers the client did not", run.Errors, strings.Join(run.FirstErrors, "; "))
	}
	if err := caddy.Load(idle, true); err != nil {
		t.Fatalf("loading the idle Caddy again: %v", err)
	}
	waitQuery(t, prom, fmt.Sprintf(`sum(%s) == %d`, before, int64(base)+run.PromptTokens),
		"Prometheus holding every answer of the run")
	caught := time.Now().Unix()
	waitQuery(t, prom, fmt.Sprintf(`timestamp(job:prefix_cache_hit_rate:ratio_rate5m{job=%q}) > %d`, benchJob, caught+1),
		"the recording rules evaluated after Prometheus held every answer")

	hit := strings.ReplaceAll(readDashboard(t).panel(t, "Prefix-cache hit rate").Targets[0].Expr, "$job", benchJob)
	s, err = prom.query(hit)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 {
		t.Fatalf("the hit-rate panel's %s returned %d series, want 1: %v", hit, len(s), s)
	}
	t.Logf("hit-rate panel %.4f, the benchmark's figure %.4f", s[0].Value, run.HitRate)
	if d := math.Abs(s[0].Value - run.HitRate); !(d <= benchPanelTolerance) {
		t.Errorf("the hit-rate panel reads %.4f, the benchmark %.4f: %.4f apart, want at most %v", s[0].Value, run.HitRate, d, benchPanelTolerance)
	}
}
