// Command demo shows what prefix_cache does, in about a minute: it starts
// 4 simulated inference engines and Caddy in this process, Caddy configured
// from the repository's Caddyfile.example, and replays the same
// shared-prefix chat workload through Caddy twice, once with round_robin
// and once with prefix_cache, at a request rate where round robin
// saturates the fleet. It prints the table of token hit rates and time to
// first token.
//
//	go run ./bench/cmd/demo
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	"github.com/prefixcache/caddy-prefixcache/bench/report"
	"github.com/prefixcache/caddy-prefixcache/bench/workload"
)

// The demo's setup: a fleet, a rate just past round robin's saturation
// point for it, and enough requests to run ~25 seconds per policy.
const (
	engines  = 4
	qps      = 28
	requests = 600
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	root, err := driver.RepoRoot()
	if err != nil {
		return err
	}
	caddyfile, err := os.ReadFile(filepath.Join(root, "Caddyfile.example"))
	if err != nil {
		return err
	}
	policies, err := driver.ParsePolicies("round_robin,prefix_cache")
	if err != nil {
		return err
	}
	ecfg := engine.DefaultConfig()
	cfg := driver.Config{
		Engines:   engines,
		Engine:    ecfg,
		Caddyfile: caddyfile,
		Policies:  policies,
		QPS:       []float64{qps},
		Progress:  os.Stderr,
	}

	// Groups of prompts sharing a system prompt, sized so that their
	// working set fills 73% of the fleet's KV caches: a replica can hold
	// its share of the groups, not all of them.
	kvTokens := engines * ecfg.KVBlocks * ecfg.BlockSize
	w, err := workload.LLMDSharedPrefix(kvTokens, 0.73, requests, 1).Generate()
	if err != nil {
		return err
	}
	w.Model = ecfg.Model

	fmt.Fprintf(os.Stderr, "demo: %d simulated engines behind Caddy (%s), %s, %g requests/s\n",
		engines, filepath.Join(root, "Caddyfile.example"), w.Description, float64(qps))
	res, err := driver.Benchmark(ctx, cfg, w)
	if err != nil {
		return err
	}
	fmt.Println()
	if err := report.Markdown(os.Stdout, []*driver.Result{res}); err != nil {
		return err
	}
	if len(res.Runs) == 2 {
		rr, pc := res.Runs[0], res.Runs[1]
		fmt.Printf("\nprefix_cache: token hit rate %.0f%% (round_robin %.0f%%), TTFT p90 %.0f ms (round_robin %.0f ms).\n",
			100*pc.HitRate, 100*rr.HitRate, 1000*pc.TTFT.P90, 1000*rr.TTFT.P90)
	}
	return nil
}
