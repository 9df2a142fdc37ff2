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
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
)

func main() {
	duration := flag.Duration("duration", 60*time.Second, "how long each run sends requests")
	clients := flag.Int("clients", 16, "concurrent clients")
	timeout := flag.Duration("timeout", 20*time.Second, "a client gives up on a request after this long")
	timeScale := flag.Float64("time-scale", 0.05, "the engines' simulated time scale (1 = a real H100)")
	configs := flag.String("configs", "recommended,minimal", "reverse_proxy option sets to run, comma-separated")
	policies := flag.String("policies", "prefix_cache,least_conn", "lb_policy values to run, comma-separated")
	flag.Parse()

	cfg := engine.DefaultConfig()
	cfg.TimeScale = *timeScale
	var results []Result
	for _, c := range strings.Split(*configs, ",") {
		for _, p := range strings.Split(*policies, ",") {
			fmt.Fprintf(os.Stderr, "running %s / %s for %v...\n", c, p, *duration)
			r, err := Run(context.Background(), Options{
				Policy: p, Config: c, Duration: *duration, Clients: *clients, Timeout: *timeout, Engine: cfg,
			})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			results = append(results, r)
		}
	}
	report(os.Stdout, results)
}

// report prints one line per run, then the requests each engine reached
// by phase.
func report(w io.Writer, results []Result) {
	fmt.Fprintf(w, "| config | policy | sent | served | lost | lost by cause | lost by phase sent | held by the wedged engine | engine 0 served after restart | p50 | p99 |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|\n")
	for _, r := range results {
		var causes, phases []string
		for c, n := range r.LostBy {
			causes = append(causes, fmt.Sprintf("%s: %d", c, n))
		}
		for p, n := range r.LostIn {
			if n > 0 {
				phases = append(phases, fmt.Sprintf("%s: %d", phaseNames[p], n))
			}
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %s | %s | %d | %d | %v | %v |\n",
			r.Config, r.Policy, r.Sent, r.OK, r.Lost, strings.Join(causes, ", "), strings.Join(phases, ", "),
			r.Hung[1], r.Restarted, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "\nrequests reaching each engine, by phase (%s):\n", strings.Join(phaseNames[:], " / "))
	for _, r := range results {
		fmt.Fprintf(w, "  %-11s %-12s", r.Config, r.Policy)
		for i, byPhase := range r.Reached {
			fmt.Fprintf(w, "  engine%d %v", i, byPhase)
		}
		fmt.Fprintln(w)
	}
}
