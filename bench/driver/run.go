package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	"github.com/prefixcache/caddy-prefixcache/bench/workload"
)

// Config configures a benchmark.
type Config struct {
	// Engines is the fleet size.
	Engines int

	// Engine configures every engine; its TimeScale also scales the
	// workload's arrival and think times.
	Engine engine.Config

	// Caddyfile is the Caddy configuration, with {$LISTEN} and
	// {$UPSTREAMS} placeholders (see StartProxy).
	Caddyfile []byte

	// Policies are compared on the same requests.
	Policies []Policy

	// QPS is the ladder of request rates to offer open loop, in requests
	// per simulated second. If empty, Users is used.
	QPS []float64

	// Users is the ladder of concurrent users of a closed-loop replay.
	Users []int

	// SampleInterval is the simulated time between two /metrics samples.
	// Default: 250ms.
	SampleInterval time.Duration

	// LoadFactor and LoadAllowance define the load bound that the report
	// checks engines against (prefix_cache's load_factor and
	// load_allowance). Default: 1.25 and 16, as in Caddyfile.example.
	LoadFactor    float64
	LoadAllowance int

	// NoBound skips computing the upper bound of the hit rate.
	NoBound bool

	// RequestTimeout bounds one request, in wall time, so that a stuck
	// stream cannot hang a run. Default: 5m.
	RequestTimeout time.Duration

	// Progress, if not nil, receives a line per run.
	Progress io.Writer

	// Edges is the number of Caddy instances, all with the same
	// configuration, in front of the fleet; each request goes to one of
	// them at random (see EdgeSeed), as an L4 balancer in front of an
	// edge tier sends it. Default: 1, a Caddy in this process. Several
	// run as child processes, the benchmark binary re-executed, which
	// must call ServeEdgeIfChild first thing in main or TestMain.
	Edges int

	// EdgeProcesses runs a single edge as a child process too, so that 1
	// and N edges can be compared with the same process layout.
	EdgeProcesses bool

	// EdgeSeed seeds each request's choice of edge.
	EdgeSeed uint64

	// EdgesSent, if from 1 to Edges, sends every request to one of the
	// first EdgesSent edges only, the others running (and syncing)
	// idle: with Edges 4 and EdgesSent 1, the machine carries four edge
	// processes while one edge routes, which tells what the edges cost
	// this one machine apart from what splitting the routing costs.
	// Default: 0, every edge.
	EdgesSent int

	// Sync, when SyncRedis, starts a redis-server for each run and sets
	// the sync option of every prefix_cache policy to it (see WithSync).
	Sync string
}

// Result holds every run of one workload.
type Result struct {
	Workload    string        `json:"workload"`
	Description string        `json:"description"`
	Engines     int           `json:"engines"`
	Engine      engine.Config `json:"engine"`
	Requests    int           `json:"requests"`
	Bound       *Bound        `json:"upper_bound,omitempty"`

	// Edges is the number of Caddy instances in front of the fleet, and
	// Sync what they shared placements through ("" for nothing).
	Edges int    `json:"edges"`
	Sync  string `json:"sync,omitempty"`

	// LoadFactor and LoadAllowance are the load bound the runs' over-bound
	// figures check.
	LoadFactor    float64 `json:"load_factor"`
	LoadAllowance int     `json:"load_allowance"`

	Runs []*Run `json:"runs"`
}

// Run holds the figures of one policy at one load.
type Run struct {
	Policy string  `json:"policy"`
	QPS    float64 `json:"qps,omitempty"`
	Users  int     `json:"users,omitempty"`

	Requests int `json:"requests"`
	Errors   int `json:"errors"`

	// Edges is the number of Caddy instances the requests were spread
	// over, EdgeRequests the requests sent to each, and Sync what the
	// edges shared placements through: "redis", or "" for nothing (also
	// for a policy with nothing to sync). EdgeProcesses says whether the
	// edges ran as child processes (always, for more than one), not in the
	// benchmark's own process.
	Edges         int   `json:"edges"`
	EdgeProcesses bool  `json:"edge_processes"`
	EdgeRequests  []int `json:"edge_requests,omitempty"`
	// EdgesSent is how many of the edges were sent requests, when fewer
	// than Edges (Config.EdgesSent).
	EdgesSent int    `json:"edges_sent,omitempty"`
	Sync      string `json:"sync,omitempty"`
	// SyncBytes is what the edges sent the redis-server during the
	// replay (total_net_input_bytes: every placement and load report as
	// a PUBLISH command, RESP framing and channel name included), and
	// SyncPublishes the PUBLISH commands among it.
	SyncBytes     int64 `json:"sync_bytes,omitempty"`
	SyncPublishes int64 `json:"sync_publishes,omitempty"`

	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	HitRate      float64 `json:"hit_rate"`

	// ShareOfBound is HitRate divided by the upper bound's hit rate.
	ShareOfBound float64 `json:"share_of_bound,omitempty"`

	TTFT Percentiles `json:"ttft"`
	E2E  Percentiles `json:"e2e"`

	// EngineTTFT is the TTFT the engines saw, from a request's arrival at
	// its engine to its first token: TTFT less the path from the client
	// through the edge, which on this one machine includes the edges'
	// share of its CPU. Routing decides EngineTTFT; the machine adds the
	// rest.
	EngineTTFT Percentiles `json:"engine_ttft"`

	// OutputTPS is output tokens per simulated second over the run.
	OutputTPS float64 `json:"output_tps"`

	// Duration is the run's simulated length; MaxLate the latest a
	// request was sent after its scheduled time (the client's own lag).
	Duration float64 `json:"duration"`
	MaxLate  float64 `json:"max_late"`

	// MaxInFlight is the largest in-flight count of any engine in any
	// sample, MeanInFlight the mean per engine and sample.
	MaxInFlight  int     `json:"max_in_flight"`
	MeanInFlight float64 `json:"mean_in_flight"`

	// OverBound counts the samples, of Samples, in which an engine carried
	// more than LoadFactor x the mean in-flight + LoadAllowance.
	OverBound int `json:"over_bound"`
	Samples   int `json:"samples"`

	// OverBoundAdmissions counts the requests sent to an upstream that
	// already carried the load bound, by the client's own accounting of
	// requests in flight per upstream (see LoadFactor).
	OverBoundAdmissions int `json:"over_bound_admissions"`

	Engines []EngineLoad `json:"engine_loads"`

	// Reasons counts prefix_cache's reasons (match, spill, cold, ...).
	Reasons map[string]int `json:"reasons,omitempty"`

	// TimerLag is how late, in wall milliseconds, a goroutine sleeping
	// 10ms woke up during the run: CPU starvation, which stretches the
	// engines' simulated time for every policy alike.
	TimerLag Percentiles `json:"timer_lag_ms"`

	// FirstErrors holds a few error messages.
	FirstErrors []string `json:"first_errors,omitempty"`
}

// maxErrorsKept bounds Run.FirstErrors.
const maxErrorsKept = 5

// Benchmark runs every policy at every load of cfg on w, each on a fresh
// fleet behind a freshly loaded Caddy, and computes the upper bound.
func Benchmark(ctx context.Context, cfg Config, w *workload.Workload) (*Result, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	res := &Result{
		Workload:    w.Name,
		Description: w.Description,
		Engines:     cfg.Engines,
		Engine:      cfg.Engine,
		Requests:    w.Requests(),

		LoadFactor:    cfg.LoadFactor,
		LoadAllowance: cfg.LoadAllowance,

		Edges: cfg.Edges,
		Sync:  cfg.Sync,
	}
	if !cfg.NoBound {
		t0 := time.Now()
		b, err := UpperBound(ctx, w, cfg.Engine)
		if err != nil {
			return nil, fmt.Errorf("computing the upper bound: %w", err)
		}
		res.Bound = &b
		cfg.progress("[%s] upper bound: token hit rate %.3f of %d prompt tokens (%.1fs)\n",
			w.Name, b.HitRate, b.PromptTokens, time.Since(t0).Seconds())
	}
	for _, l := range cfg.loads() {
		for _, p := range cfg.Policies {
			t0 := time.Now()
			run, err := runOne(ctx, cfg, w, p, l)
			if err != nil {
				return res, fmt.Errorf("%s at %s: %w", p.Name, l, err)
			}
			if res.Bound != nil && res.Bound.HitRate > 0 {
				run.ShareOfBound = run.HitRate / res.Bound.HitRate
			}
			res.Runs = append(res.Runs, run)
			cfg.progress("[%s] %-12s %s%s: %d req, %d err, hit %.3f (%.0f%% of bound), TTFT p50/p90 %.3f/%.3fs, max in-flight %d, timer lag p99 %.1fms (%.1fs)\n",
				w.Name, p.Name, l, edgesLabel(run), run.Requests, run.Errors, run.HitRate, 100*run.ShareOfBound,
				run.TTFT.P50, run.TTFT.P90, run.MaxInFlight, run.TimerLag.P99, time.Since(t0).Seconds())
		}
	}
	return res, nil
}

// String names a load for progress lines.
func (l load) String() string {
	if l.QPS > 0 {
		return fmt.Sprintf("qps=%g", l.QPS)
	}
	return fmt.Sprintf("users=%d", l.Users)
}

func (cfg *Config) setDefaults() error {
	if cfg.Engines < 1 {
		return fmt.Errorf("engines must be positive, got %d", cfg.Engines)
	}
	if len(cfg.Policies) == 0 {
		return errors.New("no policy to run")
	}
	if len(cfg.QPS) == 0 && len(cfg.Users) == 0 {
		return errors.New("neither a QPS nor a users ladder")
	}
	if len(cfg.Caddyfile) == 0 {
		return errors.New("no Caddyfile")
	}
	if cfg.Engine.TimeScale <= 0 {
		return fmt.Errorf("the engines' time_scale must be positive to measure latency, got %v", cfg.Engine.TimeScale)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Minute
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = 250 * time.Millisecond
	}
	if cfg.LoadFactor == 0 {
		cfg.LoadFactor = 1.25
	}
	if cfg.LoadAllowance == 0 {
		cfg.LoadAllowance = 16
	}
	if cfg.Edges == 0 {
		cfg.Edges = 1
	}
	if cfg.Edges < 1 {
		return fmt.Errorf("edges must be positive, got %d", cfg.Edges)
	}
	if cfg.EdgesSent < 0 || cfg.EdgesSent > cfg.Edges {
		return fmt.Errorf("edges sent must be from 0 to the %d edges, got %d", cfg.Edges, cfg.EdgesSent)
	}
	if _, err := ParseSync(cfg.Sync); err != nil {
		return err
	}
	return nil
}

// edgesLabel describes a run's edge tier in a progress line: nothing for
// the one in-process edge the benchmark always had.
func edgesLabel(run *Run) string {
	if run.Edges <= 1 && run.Sync == "" {
		return ""
	}
	s := fmt.Sprintf(" edges=%d", run.Edges)
	if run.EdgesSent > 0 {
		s += fmt.Sprintf(" sent-to=%d", run.EdgesSent)
	}
	if run.Sync != "" {
		s += " sync=" + run.Sync
	}
	return s
}

func (cfg *Config) loads() []load {
	var ls []load
	for _, q := range cfg.QPS {
		ls = append(ls, load{QPS: q})
	}
	if len(ls) == 0 {
		for _, u := range cfg.Users {
			ls = append(ls, load{Users: u})
		}
	}
	return ls
}

func (cfg *Config) progress(format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, format, args...)
	}
}

// runOne runs policy p at load l on a fresh fleet and Caddy.
func runOne(ctx context.Context, cfg Config, w *workload.Workload, p Policy, l load) (*Run, error) {
	ecfg := cfg.Engine
	ecfg.KVEvents = ecfg.KVEvents || p.KVEvents
	fleet, err := engine.StartFleet(cfg.Engines, ecfg)
	if err != nil {
		return nil, fmt.Errorf("starting engines: %w", err)
	}
	defer fleet.Close()
	edges, err := startTier(ctx, cfg, fleet.Addrs(), p)
	if err != nil {
		return nil, err
	}
	defer edges.stop()

	transport := &http.Transport{
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: cfg.RequestTimeout}

	ts := cfg.Engine.TimeScale
	smp := &sampler{
		client:   &http.Client{Timeout: 5 * time.Second},
		addrs:    fleet.Addrs(),
		interval: max(time.Millisecond, time.Duration(float64(cfg.SampleInterval)*ts)),
	}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	probe := &lagProbe{}
	go func() {
		defer close(sampled)
		done := make(chan struct{})
		go func() { defer close(done); probe.run(sctx) }()
		smp.run(sctx)
		<-done
	}()

	var syncBefore, syncAfter PublishStats
	if edges.redis != nil {
		if syncBefore, err = edges.redis.Stats(ctx); err != nil {
			stopSampling()
			<-sampled
			return nil, fmt.Errorf("redis-server stats: %w", err)
		}
	}
	sent := edges.urls
	if cfg.EdgesSent > 0 {
		sent = sent[:cfg.EdgesSent]
	}
	rp := newReplayer(sent, cfg.EdgeSeed, client, w, ts)
	t0 := time.Now()
	rp.run(ctx, w, l)
	elapsed := time.Since(t0)
	stopSampling()
	<-sampled
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if edges.redis != nil {
		if syncAfter, err = edges.redis.Stats(ctx); err != nil {
			return nil, fmt.Errorf("redis-server stats: %w", err)
		}
	}
	// An edge (or the redis-server) that died during the run fails it.
	if err := edges.stop(); err != nil {
		return nil, err
	}

	run := summarize(rp.records, ts, elapsed)
	lag := percentiles(probe.lags, 1)
	run.TimerLag = Percentiles{P50: 1000 * lag.P50, P90: 1000 * lag.P90, P99: 1000 * lag.P99}
	run.Policy, run.QPS, run.Users = p.Name, l.QPS, l.Users
	run.Edges, run.Sync, run.EdgeProcesses = len(edges.urls), edges.sync, !edges.local
	if len(sent) < len(edges.urls) {
		run.EdgesSent = len(sent)
	}
	run.SyncBytes = syncAfter.InputBytes - syncBefore.InputBytes
	run.SyncPublishes = syncAfter.Publishes - syncBefore.Publishes
	if run.Edges > 1 {
		run.EdgeRequests = make([]int, run.Edges)
		for _, r := range rp.records {
			if r.E2E > 0 { // sent
				run.EdgeRequests[r.Edge]++
			}
		}
	}
	var firstTokens []time.Duration
	for _, e := range fleet.Engines() {
		firstTokens = append(firstTokens, e.FirstTokenTimes()...)
	}
	run.EngineTTFT = percentiles(firstTokens, ts)
	addrs := fleet.Addrs()
	run.Engines = make([]EngineLoad, len(addrs))
	for i, st := range fleet.Stats() {
		run.Engines[i] = EngineLoad{Addr: addrs[i], HitRate: st.HitRate(), Preemptions: st.Preemptions}
	}
	for _, r := range rp.records {
		if i := slices.Index(addrs, r.Upstream); i >= 0 {
			run.Engines[i].Requests++
		}
	}
	run.OverBoundAdmissions = admissions(rp.records, addrs, cfg.LoadFactor, cfg.LoadAllowance)
	samples := smp.Samples()
	run.Samples = len(samples)
	run.MaxInFlight, run.MeanInFlight, run.OverBound = loadFigures(samples, run.Engines, cfg.LoadFactor, cfg.LoadAllowance)
	return run, nil
}

// summarize computes a run's client-side figures from its records.
func summarize(recs []Record, timeScale float64, elapsed time.Duration) *Run {
	run := &Run{Requests: len(recs)}
	var ttft, e2e []time.Duration
	for i := range recs {
		r := &recs[i]
		run.MaxLate = max(run.MaxLate, r.Late.Seconds()/timeScale)
		// Other policies leave the placeholder unreplaced.
		if r.Reason != "" && !strings.HasPrefix(r.Reason, "{") {
			if run.Reasons == nil {
				run.Reasons = map[string]int{}
			}
			run.Reasons[r.Reason]++
		}
		if !r.OK() {
			run.Errors++
			if len(run.FirstErrors) < maxErrorsKept {
				run.FirstErrors = append(run.FirstErrors, r.Err)
			}
			continue
		}
		run.PromptTokens += int64(r.PromptTokens)
		run.CachedTokens += int64(r.CachedTokens)
		run.OutputTokens += int64(r.OutputTokens)
		ttft = append(ttft, r.TTFT)
		e2e = append(e2e, r.E2E)
	}
	if run.PromptTokens > 0 {
		run.HitRate = float64(run.CachedTokens) / float64(run.PromptTokens)
	}
	run.TTFT = percentiles(ttft, timeScale)
	run.E2E = percentiles(e2e, timeScale)
	run.Duration = elapsed.Seconds() / timeScale
	if run.Duration > 0 {
		run.OutputTPS = float64(run.OutputTokens) / run.Duration
	}
	return run
}
