// Command demo shows what prefix_cache does, in about a minute: it starts
// 4 simulated inference engines and Caddy in this process, Caddy configured
// from the repository's Caddyfile.example, and replays the same
// shared-prefix chat workload through Caddy twice, once with round_robin
// and once with prefix_cache, at a request rate where round robin
// saturates the fleet. It prints the table of token hit rates and time to
// first token. It says on stderr what it is doing at each stage.
//
//	go run ./bench/cmd/demo
//
// The first run compiles Caddy and its modules, which takes a few minutes;
// go run says nothing meanwhile.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"

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
	caddyfilePath := filepath.Join(root, "Caddyfile.example")
	caddyfile, err := os.ReadFile(caddyfilePath)
	if err != nil {
		return err
	}
	policies, err := driver.ParsePolicies("round_robin,prefix_cache")
	if err != nil {
		return err
	}
	ecfg := engine.DefaultConfig()

	// Groups of prompts sharing a system prompt, sized so that their
	// working set fills 73% of the fleet's KV caches: a replica can hold
	// its share of the groups, not all of them.
	say("generating the workload")
	kvTokens := engines * ecfg.KVBlocks * ecfg.BlockSize
	w, err := workload.LLMDSharedPrefix(kvTokens, 0.73, requests, 1).Generate()
	if err != nil {
		return err
	}
	w.Model = ecfg.Model
	say("%s; %d requests at %g/s, through Caddy configured from %s", w.Description, w.Requests(), float64(qps), caddyfilePath)

	// One policy at a time, so that each stage can be announced; each
	// run gets fresh engines and a freshly loaded Caddy either way.
	res := &driver.Result{}
	expected := time.Duration(float64(w.Requests()) / qps * ecfg.TimeScale * float64(time.Second))
	for i, p := range policies {
		say("[%d/%d] %s: starting %d simulated engines, loading Caddy with lb_policy %s, replaying %d requests (about %v)",
			i+1, len(policies), p.Name, engines, p.Name, w.Requests(), expected.Round(time.Second))
		cfg := driver.Config{
			Engines:   engines,
			Engine:    ecfg,
			Caddyfile: caddyfile,
			Policies:  []driver.Policy{p},
			QPS:       []float64{qps},
			Progress:  os.Stderr,
		}
		stopTicking := tick(fmt.Sprintf("[%d/%d] %s", i+1, len(policies), p.Name), expected)
		r, err := driver.Benchmark(ctx, cfg, w)
		stopTicking()
		if err != nil {
			return err
		}
		if i == 0 { // the workload's upper bound comes with the first
			*res = *r
		} else {
			res.Runs = append(res.Runs, r.Runs...)
		}
	}

	say("results")
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

// say prints a stage line on stderr.
func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "demo: "+format+"\n", args...)
}

// tick prints how long the stage has run every 5 seconds until the
// returned function is called.
func tick(stage string, expected time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t0 := time.Now()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				say("%s: %v of about %v", stage, time.Since(t0).Round(time.Second), expected.Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-stopped }
}
