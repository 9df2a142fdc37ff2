// Command faults measures the requests a Caddy in front of four simulated
// LLM engines loses while the engines fail under sustained load: one is
// killed mid-run and later restarted (cold) on the same address, one
// wedges (accepts connections and requests, never answers, health checks
// included), one answers 503 to everything. It runs the same workload and
// fault schedule with lb_policy prefix_cache and with stock least_conn,
// under the README's minimal reverse_proxy options and under the
// recommended ones (see proxyOptions in run.go), and prints the requests
// each lost. Loopback only, bounded in time:
//
//	go run ./bench/faults                     # 60 s per run, 4 runs
//	go run ./bench/faults -duration 10s -configs recommended
//
// A request is lost when its client does not get a 200 with a completion
// within -timeout. `go test ./bench/faults` runs a short version.
//
// With -sync redis, prefix_cache's edges share placements through a
// redis-server, and a second fault runs: that redis-server killed with
// SIGKILL mid-run and restarted on the same port after a delay, every
// engine healthy, in front of at least two edges (child processes). It
// runs twice: as a control, with no edge attached to Redis, which shows
// the benchmark's own noise under the same schedule, then with the edges
// syncing through it. Expected: no request lost, and no more delayed
// (slower than delayFactor x the p99 before the kill) than in the
// control, phase medians alike:
//
//	go run ./bench/faults -sync redis -duration 20s
//
// With -faults metrics, prefix_cache scrapes the engines' /metrics
// (engine_metrics) while the endpoints break, lie and recover, every
// engine serving throughout (see FaultMetrics), after a control run with
// engine_metrics off under the same schedule. Expected: no request lost,
// and no more delayed than in the control beyond what the lies move:
//
//	go run ./bench/faults -faults metrics -configs recommended -duration 20s
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
	"github.com/prefixcache/caddy-prefixcache/bench/engine"
)

func main() {
	// With several edges this binary is also each edge, re-executed.
	driver.ServeEdgeIfChild()
	duration := flag.Duration("duration", 60*time.Second, "how long each run sends requests")
	clients := flag.Int("clients", 16, "concurrent clients")
	timeout := flag.Duration("timeout", 20*time.Second, "a client gives up on a request after this long")
	timeScale := flag.Float64("time-scale", 0.05, "the engines' simulated time scale (1 = a real H100)")
	configs := flag.String("configs", "recommended,minimal", "reverse_proxy option sets to run, comma-separated")
	policies := flag.String("policies", "prefix_cache,least_conn", "lb_policy values to run, comma-separated")
	syncFlag := flag.String("sync", "", "redis: prefix_cache's edges share placements through a redis-server, and the redis fault runs too")
	edges := flag.Int("edges", 1, "Caddy instances, each request to one at random (the redis fault runs with at least 2)")
	faults := flag.String("faults", "", "faults to run, comma-separated: engines, redis, metrics (default: engines, and redis with -sync redis)")
	flag.Parse()

	sync, err := driver.ParseSync(*syncFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "-sync:", err)
		os.Exit(2)
	}
	if *faults == "" {
		*faults = FaultEngines
		if sync == driver.SyncRedis {
			*faults += "," + FaultRedis
		}
	}

	cfg := engine.DefaultConfig()
	cfg.TimeScale = *timeScale
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []Result
	for _, f := range strings.Split(*faults, ",") {
		if f == FaultRedis && sync != driver.SyncRedis {
			fmt.Fprintln(os.Stderr, "the redis fault needs -sync redis")
			os.Exit(2)
		}
		for _, c := range strings.Split(*configs, ",") {
			for _, p := range strings.Split(*policies, ",") {
				n, syncs, scrape := *edges, []string{sync}, []bool{false}
				switch f {
				case FaultRedis:
					if !strings.Contains(p, "prefix_cache") {
						continue // nothing of it syncs
					}
					n, syncs = max(n, 2), []string{"", sync} // the control first
				case FaultMetrics:
					if p != "prefix_cache" {
						continue // nothing of it scrapes
					}
					scrape = []bool{false, true} // the control first
				}
				for _, s := range syncs {
					for _, em := range scrape {
						fmt.Fprintf(os.Stderr, "running %s faults, %s / %s, %d edge(s), sync %q, engine_metrics %v, for %v...\n", f, c, p, n, s, em, *duration)
						r, err := Run(ctx, Options{
							Policy: p, Config: c, Duration: *duration, Clients: *clients, Timeout: *timeout, Engine: cfg,
							Fault: f, Edges: n, Sync: s, EngineMetrics: em,
						})
						if err != nil {
							fmt.Fprintln(os.Stderr, err)
							os.Exit(1)
						}
						results = append(results, r)
					}
				}
			}
		}
	}
	report(os.Stdout, results)
}

// report prints the engine-fault runs, then the redis-fault and the
// metrics-fault runs.
func report(w io.Writer, results []Result) {
	var engines, redis, metrics []Result
	for _, r := range results {
		switch r.Fault {
		case FaultRedis:
			redis = append(redis, r)
		case FaultMetrics:
			metrics = append(metrics, r)
		default:
			engines = append(engines, r)
		}
	}
	sep := false
	for _, part := range []struct {
		runs []Result
		rep  func(io.Writer, []Result)
	}{{engines, reportEngines}, {redis, reportRedis}, {metrics, reportMetrics}} {
		if len(part.runs) == 0 {
			continue
		}
		if sep {
			fmt.Fprintln(w)
		}
		part.rep(w, part.runs)
		sep = true
	}
}

// reportMetrics prints one line per metrics-fault run.
func reportMetrics(w io.Writer, results []Result) {
	fmt.Fprintf(w, "engines' /metrics broken at %.0f%% of the run (engine 0 hangs, 1 answers 500, 2 garbage, 3 a body past the size bound), lying at %.0f%% (0 and 2 claim a million requests queued, 1 none), recovered at %.0f%%; a request is delayed past the noise above %d x the warm phase's p99:\n\n",
		100*metricsPhaseStart[phaseMetricsBroken], 100*metricsPhaseStart[phaseMetricsLying], 100*metricsPhaseStart[phaseMetricsRecovered], delayFactor)
	phases := strings.Join(metricsPhaseNames[:phaseMetricsRecovered+1], " / ")
	fmt.Fprintf(w, "| config | policy | engine_metrics | scrapes | sent | served | lost | lost by cause | delayed | threshold | p50 %s | p99 %s |\n", phases, phases)
	fmt.Fprintf(w, "|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	for _, r := range results {
		p50, p99 := phaseLatencies(r, phaseMetricsRecovered+1)
		em := "off (control)"
		if r.EngineMetrics {
			em = "on"
		}
		var scrapes int64
		for _, n := range r.Scrapes {
			scrapes += n
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %d | %d | %s | %d | %v | %s | %s |\n",
			configLabel(r), r.Policy, em, scrapes, r.Sent, r.OK, r.Lost, lostCauses(r),
			r.Delayed, r.DelayThreshold.Round(100*time.Microsecond), p50, p99)
	}
}

// reportRedis prints one line per redis-fault run.
func reportRedis(w io.Writer, results []Result) {
	fmt.Fprintf(w, "redis-server killed (SIGKILL) at %.0f%% of the run and restarted on the same port at %.0f%%; a request is delayed past the noise above %d x the warm phase's p99:\n\n",
		100*redisPhaseStart[phaseRedisKilled], 100*redisPhaseStart[phaseRedisRestarted], delayFactor)
	phases := strings.Join(redisPhaseNames[:phaseRedisRestarted+1], " / ")
	fmt.Fprintf(w, "| config | policy | edges | sync | sent | served | lost | lost by cause | delayed | threshold | p50 %s | p99 %s | one replica, shared prompt, %s | one replica, short prompt, %s |\n", phases, phases, phases, phases)
	fmt.Fprintf(w, "|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		p50, p99 := phaseLatencies(r, phaseRedisRestarted+1)
		sync := r.Sync
		if sync == "" {
			sync = "none (control)"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %d | %d | %d | %s | %d | %v | %s | %s | %s | %s |\n",
			r.Config, r.Policy, r.Edges, sync, r.Sent, r.OK, r.Lost, lostCauses(r),
			r.Delayed, r.DelayThreshold.Round(100*time.Microsecond), p50, p99,
			keptShares(r, sharedPrompt, phaseRedisRestarted+1), keptShares(r, shortPrompt, phaseRedisRestarted+1))
	}
	fmt.Fprintf(w, "\none replica: of the conversations with at least two turns served in a phase, those whose turns in it all went to one engine; shared prompt: those opening with one of 8 long system prompts (~3 KB), short prompt: the others (their whole text under min_match's 1 KiB).\n")
	fmt.Fprintf(w, "\nturns served by another engine than their conversation's previous turn, by the reason of the moved turn's placement, %s:\n\n", phases)
	fmt.Fprintf(w, "| policy | sync | shared prompt | short prompt |\n|---|---|---|---|\n")
	for _, r := range results {
		sync := r.Sync
		if sync == "" {
			sync = "none (control)"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.Policy, sync,
			movesShares(r, sharedPrompt, phaseRedisRestarted+1), movesShares(r, shortPrompt, phaseRedisRestarted+1))
	}
}

// movesShares formats, for the first n phases, the moved turns of a kind
// of conversation by reason, most frequent first.
func movesShares(r Result, kind, n int) string {
	var parts []string
	for p := range n {
		moves := r.Moves[kind][p]
		reasons := slices.Collect(maps.Keys(moves))
		slices.SortFunc(reasons, func(a, b string) int {
			return cmp.Or(cmp.Compare(moves[b], moves[a]), cmp.Compare(a, b))
		})
		var rs []string
		for _, reason := range reasons {
			rs = append(rs, fmt.Sprintf("%s %d", cmp.Or(reason, "(none)"), moves[reason]))
		}
		if len(rs) == 0 {
			rs = append(rs, "0")
		}
		parts = append(parts, strings.Join(rs, ", "))
	}
	return strings.Join(parts, " / ")
}

// keptShares formats, for the first n phases, the conversations of a
// kind that kept one replica out of those with two turns or more in the
// phase.
func keptShares(r Result, kind, n int) string {
	var parts []string
	for p := range n {
		conv, kept := r.Conversations[kind][p], r.Kept[kind][p]
		if conv == 0 {
			parts = append(parts, "-")
			continue
		}
		parts = append(parts, fmt.Sprintf("%d/%d (%.0f%%)", kept, conv, 100*float64(kept)/float64(conv)))
	}
	return strings.Join(parts, " / ")
}

// reportEngines prints one line per engine-fault run, then the requests
// each engine reached by phase.
func reportEngines(w io.Writer, results []Result) {
	fmt.Fprintf(w, "| config | policy | sent | served | lost | lost by cause | lost by phase sent | held by the wedged engine | engine 0 served after restart | p50 | p99 |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|\n")
	for _, r := range results {
		var phases []string
		for p, n := range r.LostIn {
			if n > 0 {
				phases = append(phases, fmt.Sprintf("%s: %d", phaseNames[p], n))
			}
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %s | %s | %d | %d | %v | %v |\n",
			configLabel(r), r.Policy, r.Sent, r.OK, r.Lost, lostCauses(r), strings.Join(phases, ", "),
			r.Hung[1], r.Restarted, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "\nrequests reaching each engine, by phase (%s):\n", strings.Join(phaseNames, " / "))
	for _, r := range results {
		fmt.Fprintf(w, "  %-11s %-12s", r.Config, r.Policy)
		for i, byPhase := range r.Reached {
			fmt.Fprintf(w, "  engine%d %v", i, byPhase)
		}
		fmt.Fprintln(w)
	}
}

// configLabel names a run's option set, with its edges and sync when
// they are not the one in-process Caddy.
func configLabel(r Result) string {
	s := r.Config
	if r.Edges > 1 {
		s += fmt.Sprintf(", %d edges", r.Edges)
	}
	if r.Sync != "" {
		s += ", sync " + r.Sync
	}
	return s
}

// lostCauses lists a run's lost requests by cause.
func lostCauses(r Result) string {
	var causes []string
	for c, n := range r.LostBy {
		causes = append(causes, fmt.Sprintf("%s: %d", c, n))
	}
	return strings.Join(causes, ", ")
}

// phaseLatencies gives a run's p50 and p99 latencies of its first n
// phases, separated by " / ".
func phaseLatencies(r Result, n int) (p50, p99 string) {
	var a, b []string
	for p := range n {
		a = append(a, r.PhaseP50[p].Round(100*time.Microsecond).String())
		b = append(b, r.PhaseP99[p].Round(100*time.Microsecond).String())
	}
	return strings.Join(a, " / "), strings.Join(b, " / ")
}
