package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	"github.com/prefixcache/caddy-prefixcache/bench/workload"
)

// TestMain lets the test binary serve as an edge process (driver.StartEdges).
func TestMain(m *testing.M) {
	driver.ServeEdgeIfChild()
	os.Exit(m.Run())
}

// edgeCaddyfile is each edge's configuration: prefix_cache reading the
// engines' metrics and answers, syncing through Redis, with a body budget
// small enough for a test to spend (1 MiB: 512 KiB of buffers at Go's
// default GOGC). AdaptCaddyfile fills in LISTEN, UPSTREAMS and REDIS.
const edgeCaddyfile = `http://{$LISTEN} {
	reverse_proxy {$UPSTREAMS} {
		lb_policy prefix_cache {
			body_budget 1MiB
			engine_metrics
			sync redis {$REDIS}
		}
		lb_retries 2
		flush_interval -1
	}
}
`

const job = "caddy-edges"

// healthyFor is how long the healthy load runs: several times testFor, so
// that an alert true for a moment of it would fire.
const healthyFor = 15 * time.Second

// An operator's view of a real edge tier: two Caddy edges syncing through
// a real redis-server, in front of three simulated vLLM engines, scraped
// by a real Prometheus that loads deploy/prometheus's rules. Under a
// healthy load no alert fires, every query of the Grafana dashboard
// returns data, its $job variable lists the tier, and its hit-rate panel
// agrees with the hit rate the client computes from the answers'
// cached_tokens. Then each incident fires its alert, pending from the
// incident on and firing within its `for` window (testFor) and
// detectWithin, and no alert fires that the incidents do not explain:
// the body budget spent by stalled uploads, an engine killed, one edge
// cut off from Redis (the tier's alert stays quiet), Redis stopped
// under both edges connected (the edge's alert stays quiet). The
// dashboard's annotations then mark the alerts firing.
func TestOperatorsView(t *testing.T) {
	promBin := lookTool(t, "prometheus", "prometheus")
	lookTool(t, "redis-server", "redis-server")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var fleets []*engine.Fleet
	var upstreams []string
	for range 3 {
		f, err := engine.StartFleet(1, engine.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		fleets = append(fleets, f)
		upstreams = append(upstreams, f.Addrs()[0])
	}
	redis, err := driver.StartRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { redis.Stop() })

	ports, err := driver.ReservePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	listens, admins, promListen := ports[:2], ports[2:4], ports[4]
	// Edge 1 reaches Redis through a TCP relay, which cuts it off alone.
	relay := startRelay(t, ports[5], redis.Addr)
	redisURLs := []string{redis.URL(), "redis://" + ports[5]}
	var configs [][]byte
	for i := range listens {
		raw, err := driver.AdaptCaddyfile([]byte(edgeCaddyfile), map[string]string{
			"LISTEN": listens[i], "UPSTREAMS": strings.Join(upstreams, " "), "REDIS": redisURLs[i],
		}, driver.Policy{Name: "prefix_cache", Usage: true}, 1)
		if err != nil {
			t.Fatal(err)
		}
		configs = append(configs, withAdmin(t, raw, admins[i]))
	}
	edges, err := driver.StartEdges(ctx, configs, listens)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { driver.StopEdges(edges) })
	for _, a := range admins {
		waitMetric(t, a, `caddy_prefix_cache_sync_connected{`, func(v float64) bool { return v == 1 }, "the edge connecting to Redis")
	}
	prom := startPrometheus(t, ctx, promBin, promListen, job, admins)
	waitQuery(t, prom, `count(up{job="`+job+`"} == 1) == 2`, "Prometheus scraping both edges")

	// Healthy: shared-prefix traffic through both edges.
	start := time.Now()
	tally := runLoad(t, ctx, listens, healthyFor)
	t.Logf("healthy load: %d requests in %v, %d prompt tokens, %d cached: hit rate %.4f",
		tally.requests, time.Since(start).Round(time.Millisecond), tally.prompt, tally.cached, tally.hitRate())
	if tally.errors > 0 {
		t.Fatalf("healthy load: %d of %d requests failed: %s", tally.errors, tally.requests, tally.firstError)
	}
	// Prometheus has scraped every answer once the edges' counters sum
	// to the client's.
	waitQuery(t, prom, fmt.Sprintf(`sum(caddy_prefix_cache_answer_tokens_total{job=%q,kind="prompt"}) == %d`, job, tally.prompt),
		"Prometheus holding every answer's prompt tokens")

	// The recording rules have been evaluated since that scrape.
	caught := time.Now().Unix()
	waitQuery(t, prom, fmt.Sprintf(`timestamp(job:prefix_cache_hit_rate:ratio_rate5m{job=%q}) > %d`, job, caught+1),
		"the recording rules evaluated after Prometheus held every answer")

	dash := readDashboard(t)
	// The hit-rate panel's real hit rate against the client's figure (the
	// answers' cached over prompt tokens, as bench/driver computes it;
	// TestHitRatePanelMatchesBenchmark compares with bench/driver's own).
	// Both count the same answers, so they differ only by how rate()
	// extrapolates each edge's counters by that edge's scrape times.
	hit := withJob(dash.panel(t, "Prefix-cache hit rate").Targets[0].Expr)
	s, err := prom.query(hit)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 {
		t.Fatalf("the hit-rate panel's %s returned %d series, want 1: %v", hit, len(s), s)
	}
	t.Logf("hit-rate panel %.4f, the client's figure %.4f", s[0].Value, tally.hitRate())
	if d := math.Abs(s[0].Value - tally.hitRate()); !(d < 0.01) {
		t.Errorf("the hit-rate panel reads %.4f, the answers' hit rate is %.4f: %.4f apart, want under 0.01", s[0].Value, tally.hitRate(), d)
	}

	// Every panel's query returns data: a number, not only NaN (0/0).
	queries := 0
	for _, p := range dash.all() {
		for _, tg := range p.Targets {
			queries++
			s, err := prom.query(withJob(tg.Expr))
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			} else if !slices.ContainsFunc(s, func(x sample) bool { return !math.IsNaN(x.Value) }) {
				t.Errorf("panel %q: %s returns no data: %v", p.Title, tg.Expr, s)
			}
		}
	}
	t.Logf("every query of the dashboard's %d panels returns data (%d queries)", len(dash.all()), queries)
	// The $job variable lists this tier.
	jobVar(t, prom, dash)
	// Nothing fired at any evaluation of the healthy run. An alert true
	// for a moment (pending) is logged: under a loaded CI machine one
	// scrape may time out, which its `for` window is there to absorb.
	window := int(time.Since(start).Seconds()) + 2
	if s, err := prom.query(fmt.Sprintf("max_over_time(ALERTS[%ds])", window)); err != nil {
		t.Fatal(err)
	} else {
		for _, a := range s {
			if a.Metric["alertstate"] == "firing" {
				t.Errorf("healthy run: %s fired (%v)", a.Metric["alertname"], a.Metric)
			} else {
				t.Logf("healthy run: %s was %s for a moment (%v)", a.Metric["alertname"], a.Metric["alertstate"], a.Metric)
			}
		}
	}
	coverage(t, admins[0], dash)

	// Each incident fires its alert: pending from the incident on (not
	// before it), firing within its `for` window and detectWithin, and
	// no alert fires that the incidents so far do not explain.
	alerted := func(name string, labels map[string]string, at time.Time, what string) {
		t.Helper()
		pending, fired := prom.incidentFires(t, name, labels, at)
		t.Logf("%s pending %v and firing %v after %s", name, pending.Round(time.Millisecond), fired.Round(time.Millisecond), what)
	}

	// Incident 1: stalled uploads hold edge 0's body budget; then bodies
	// it could route are left unread. Those requests go to the fallback
	// policy, so PrefixCacheFallbackSurge may follow.
	stalls := fillBudget(t, listens[0], admins[0])
	at := time.Now()
	probeUntil(t, listens[0], func() {
		alerted("PrefixCacheBodyBudgetExhausted", map[string]string{"instance": admins[0]}, at,
			fmt.Sprintf("edge 0's body budget was spent (%d stalled uploads)", len(stalls)))
	})
	for _, c := range stalls {
		c.Close()
	}
	onlyFired(t, prom, at, "the body budget spent", "PrefixCacheBodyBudgetExhausted", "PrefixCacheFallbackSurge")

	// Incident 2: an engine dies.
	at = time.Now()
	fleets[2].Close()
	alerted("PrefixCacheEngineScrapesFailing", map[string]string{"upstream": upstreams[2]}, at, "the engine died")
	onlyFired(t, prom, at, "an engine killed", "PrefixCacheBodyBudgetExhausted", "PrefixCacheFallbackSurge", "PrefixCacheEngineScrapesFailing")

	// Incident 3: edge 1 alone loses Redis; edge 0 stays connected.
	at = time.Now()
	relay.Close()
	alerted("PrefixCacheSyncEdgeDisconnected", map[string]string{"instance": admins[1]}, at, "edge 1 lost Redis")
	noAlert(t, prom, "PrefixCacheSyncDown", "with edge 0 connected")
	noAlert(t, prom, "PrefixCacheSyncEdgeDisconnected", "for edge 0", "instance", admins[0])
	onlyFired(t, prom, at, "one edge cut off from Redis", "PrefixCacheBodyBudgetExhausted", "PrefixCacheFallbackSurge", "PrefixCacheEngineScrapesFailing", "PrefixCacheSyncEdgeDisconnected")

	// Edge 1 reaches Redis again: both edges are connected, and the
	// edge's alert resolves.
	relay = startRelay(t, ports[5], redis.Addr)
	waitMetric(t, admins[1], `caddy_prefix_cache_sync_connected{`, func(v float64) bool { return v == 1 }, "edge 1 reconnecting to Redis")
	waitQuery(t, prom, `absent(ALERTS{alertname="PrefixCacheSyncEdgeDisconnected"})`, "PrefixCacheSyncEdgeDisconnected resolving once edge 1 is back")

	// Incident 4: Redis stops under both edges, both connected: the
	// tier's alert fires, not an edge's.
	at = time.Now()
	if err := redis.Kill(); err != nil {
		t.Fatal(err)
	}
	alerted("PrefixCacheSyncDown", nil, at, "Redis stopped under both edges")
	onlyFired(t, prom, at, "Redis stopped under both edges", "PrefixCacheBodyBudgetExhausted", "PrefixCacheFallbackSurge", "PrefixCacheEngineScrapesFailing", "PrefixCacheSyncDown")

	// The dashboard's annotation query marks every alert firing now.
	annotations(t, prom, dash)
}

// jobVar checks that the dashboard's $job variable, label_values(METRIC,
// job), lists the tier's job.
func jobVar(t *testing.T, p *prometheus, dash *dashboard) {
	t.Helper()
	for _, v := range dash.Templating.List {
		if v.Name != "job" {
			continue
		}
		q, _ := json.Marshal(v.Query)
		m := labelValues.FindSubmatch(q)
		if m == nil {
			t.Fatalf("the job variable's query %s is not label_values(METRIC, job)", q)
		}
		jobs, err := p.labelValues("job", string(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(jobs, job) {
			t.Errorf("the job variable, label_values(%s, job), lists %v, not %s", m[1], jobs, job)
		}
		return
	}
	t.Fatal("the dashboard has no job variable")
}

var labelValues = regexp.MustCompile(`label_values\((\w+), *job\)`)

// annotations checks that the dashboard's alert annotations mark the
// alerts of the tier firing now, and only those.
func annotations(t *testing.T, p *prometheus, dash *dashboard) {
	t.Helper()
	as, err := p.alerts()
	if err != nil {
		t.Fatal(err)
	}
	var firing []string
	for _, a := range as {
		if a.State == "firing" && a.Labels["job"] == job {
			firing = append(firing, a.Labels["alertname"])
		}
	}
	for _, an := range dash.Annotations.List {
		s, err := p.query(withJob(an.Expr))
		if err != nil {
			t.Fatalf("annotation %q: %v", an.Name, err)
		}
		var marked []string
		for _, x := range s {
			marked = append(marked, x.Metric["alertname"])
		}
		slices.Sort(firing)
		slices.Sort(marked)
		t.Logf("annotation %q marks %v", an.Name, marked)
		if len(firing) == 0 || !slices.Equal(slices.Compact(firing), slices.Compact(marked)) {
			t.Errorf("annotation %q marks %v; firing: %v", an.Name, marked, firing)
		}
	}
}

// onlyFired fails the test if an alert not among allowed fired at any
// evaluation since `since` (the whole seconds since, so that an alert
// that resolved just before does not count).
func onlyFired(t *testing.T, p *prometheus, since time.Time, what string, allowed ...string) {
	t.Helper()
	window := int(time.Since(since).Seconds())
	s, err := p.query(fmt.Sprintf(`max_over_time(ALERTS{alertstate="firing"}[%ds])`, window))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range s {
		if !slices.Contains(allowed, a.Metric["alertname"]) {
			t.Errorf("after %s, %s fired (%v); only %v may", what, a.Metric["alertname"], a.Metric, allowed)
		}
	}
}

// noAlert fails the test if the alert name is pending or firing with the
// given label pairs.
func noAlert(t *testing.T, p *prometheus, name, why string, labels ...string) {
	t.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	as, err := p.alerts()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Labels["alertname"] == name && hasLabels(a.Labels, want) {
			t.Errorf("%s is %s %s: %v", name, a.State, why, a.Labels)
		}
	}
}

// relay is a TCP relay from a listen address to a target, whose Close
// cuts every connection through it, as a network partition would.
type relay struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startRelay(t *testing.T, listen, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln}
	t.Cleanup(r.Close)
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			r.wg.Go(func() { io.Copy(up, c); up.Close() })
			r.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	return r
}

// Close stops accepting, cuts every relayed connection, and waits for
// the relay's goroutines. It is idempotent.
func (r *relay) Close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}

// withAdmin turns on Caddy's admin listener at addr (AdaptCaddyfile turns
// it off), for its /metrics.
func withAdmin(t *testing.T, raw []byte, addr string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["admin"] = map[string]any{"listen": addr, "config": map[string]any{"persist": false}}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tally is what the client saw of the answers, as bench/driver counts it.
type tally struct {
	requests, errors int
	prompt, cached   int64
	firstError       string
}

func (t *tally) hitRate() float64 {
	if t.prompt == 0 {
		return 0
	}
	return float64(t.cached) / float64(t.prompt)
}

// loadWorkers is the number of concurrent clients: enough to keep both
// edges and the engines busy, few enough for two shared cores.
const loadWorkers = 4

// runLoad sends the shared-prefix workload's requests (repeating it) to
// the edges in turn, from loadWorkers clients, for d, and tallies the
// answers' usage.
func runLoad(t *testing.T, ctx context.Context, listens []string, d time.Duration) *tally {
	t.Helper()
	// Few prompts repeat (8 groups of 100), so an answer's hit is mostly
	// its group's system prompt: a hit rate well inside (0, 1).
	w, err := workload.SharedPrefix{
		Groups: 8, PromptsPerGroup: 100, SystemTokens: 400, QuestionTokens: 300,
		OutputTokens: 4, Requests: 2000, Seed: 1,
	}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	bodies := make([][]byte, len(w.Conversations))
	for i, c := range w.Conversations {
		bodies[i] = chatBody(append(append([]workload.Message(nil), c.Prefix...), c.Turns[0].Messages...), c.Turns[0].MaxTokens)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	var next atomic.Int64
	var mu sync.Mutex
	tl := &tally{}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				prompt, cached, err := send(ctx, client, listens[i%len(listens)], bodies[i%len(bodies)])
				mu.Lock()
				tl.requests++
				if err != nil {
					tl.errors++
					if tl.firstError == "" {
						tl.firstError = err.Error()
					}
				} else {
					tl.prompt += prompt
					tl.cached += cached
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return tl
}

func chatBody(msgs []workload.Message, maxTokens int) []byte {
	b, _ := json.Marshal(map[string]any{"model": engine.DefaultModel, "messages": msgs, "max_tokens": maxTokens})
	return b
}

// send posts body to the edge at listen and returns the answer's prompt
// and cached tokens.
func send(ctx context.Context, client *http.Client, listen string, body []byte) (prompt, cached int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+listen+"/v1/chat/completions", strings.NewReader(string(body)))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	var a struct {
		Usage struct {
			PromptTokens        int64 `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return 0, 0, fmt.Errorf("answer: %w", err)
	}
	return a.Usage.PromptTokens, a.Usage.PromptTokensDetails.CachedTokens, nil
}

// withJob fills in the dashboard's $job variable.
func withJob(expr string) string { return strings.ReplaceAll(expr, "$job", job) }

// waitQuery waits until expr returns a sample.
func waitQuery(t *testing.T, p *prometheus, expr, why string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := p.query(expr)
		if err != nil {
			t.Fatal(err)
		}
		if len(s) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s returned nothing for 30s", why, expr)
		}
		time.Sleep(100 * time.Millisecond) // polling Prometheus, bounded by the deadline
	}
}

// metric returns the value of the first line of Caddy's /metrics at admin
// that starts with prefix.
func metric(t *testing.T, admin, prefix string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("scraping %s: %v", admin, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v, true
		}
	}
	return math.NaN(), false
}

// waitMetric waits until the metric line starting with prefix satisfies ok.
func waitMetric(t *testing.T, admin, prefix string, ok func(float64) bool, why string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, found := metric(t, admin, prefix)
		if found && ok(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s... is %v (found %v) after 30s", why, prefix, v, found)
		}
		time.Sleep(20 * time.Millisecond) // polling Caddy's metrics, bounded by the deadline
	}
}

var familyLine = regexp.MustCompile(`(?m)^# TYPE (caddy_prefix_cache_\w+) `)

// coverage checks that every metric family the module exports appears in
// a rule or a panel.
func coverage(t *testing.T, admin string, dash *dashboard) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile("prometheus/recording.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	fams := familyLine.FindAllSubmatch(b, -1)
	if len(fams) < 20 {
		t.Fatalf("only %d caddy_prefix_cache_ families on /metrics", len(fams))
	}
	for _, f := range fams {
		name := string(f[1])
		if !strings.Contains(string(rules), name) && !strings.Contains(dash.raw, name) {
			t.Errorf("%s is in no recording rule and no panel", name)
		}
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// stallSizes are the Content-Lengths of the stalled uploads that fill the
// budget, largest first: each is tried until the budget refuses it.
var stallSizes = []int{128 << 10, 64 << 10, 32 << 10, 16 << 10, 8 << 10, 4 << 10, 2 << 10, 1 << 10}

// fillBudget opens uploads to the edge at listen that send all of their
// body but its last byte, and stall, until the edge's body budget takes
// no more, and returns their connections.
func fillBudget(t *testing.T, listen, admin string) []net.Conn {
	t.Helper()
	var conns []net.Conn
	for _, size := range stallSizes {
		for range 16 {
			inUse, _ := metric(t, admin, "caddy_prefix_cache_body_bytes_in_use ")
			refused, _ := metric(t, admin, `caddy_prefix_cache_body_peeks_total{outcome="budget"}`)
			c := stall(t, listen, size)
			conns = append(conns, c)
			// Held (its bytes in use) or refused (a budget skip).
			admitted := false
			deadline := time.Now().Add(10 * time.Second)
			for {
				if v, _ := metric(t, admin, "caddy_prefix_cache_body_bytes_in_use "); v >= inUse+float64(size)/2 {
					admitted = true
					break
				}
				if v, _ := metric(t, admin, `caddy_prefix_cache_body_peeks_total{outcome="budget"}`); v > refused {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("a stalled upload of %d bytes was neither held nor refused", size)
				}
				time.Sleep(5 * time.Millisecond) // polling Caddy's metrics, bounded by the deadline
			}
			if !admitted {
				break
			}
		}
	}
	return conns
}

// stall sends a chat request's headers and all of its body of size bytes
// but the last, and leaves the connection open.
func stall(t *testing.T, listen string, size int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	head := `{"model":"` + engine.DefaultModel + `","messages":[{"role":"user","content":"`
	body := head + strings.Repeat("s", size-len(head)-len(`"}]}`)) + `"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", listen, len(body), body[:len(body)-1])
	return c
}

// probeUntil sends chat requests of 24 KiB (a size no buffer of the
// healthy load's serves) to the edge at listen, one at a time, until
// wait returns.
func probeUntil(t *testing.T, listen string, wait func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		client := &http.Client{Timeout: 30 * time.Second}
		body := chatBody([]workload.Message{{Role: "user", Content: strings.Repeat("probe ", 4<<10)}}, 1)
		for {
			select {
			case <-done:
				return
			default:
			}
			send(context.Background(), client, listen, body)
		}
	})
	defer func() { close(done); wg.Wait() }()
	wait()
}
