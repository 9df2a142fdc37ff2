// Command simengine runs simulated LLM inference engines (package
// bench/engine) on consecutive ports until interrupted, to put behind a
// Caddy with the prefix_cache policy by hand:
//
//	simengine -n 4 -port 8001 -time-scale 0.1 -kv-blocks 2048
//
// Each engine serves the OpenAI chat and completions APIs, Anthropic
// messages, /health, /v1/models and /metrics (vLLM's metric names). On
// SIGINT or SIGTERM it closes the engines and prints their statistics.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("simengine: ")

	cfg := engine.DefaultConfig()
	n := flag.Int("n", 4, "number of engines")
	host := flag.String("host", "127.0.0.1", "listen host")
	port := flag.Int("port", 8001, "port of the first engine, the others follow (0: ephemeral ports)")
	every := flag.Duration("stats", 0, "print statistics at this interval (0: only at exit)")
	flag.StringVar(&cfg.Model, "model", cfg.Model, "model name in /v1/models and metric labels")
	flag.Float64Var(&cfg.TimeScale, "time-scale", cfg.TimeScale, "multiplies all simulated times (0.1: ten times faster than real, 0: no delays)")
	flag.IntVar(&cfg.KVBlocks, "kv-blocks", cfg.KVBlocks, "KV cache capacity in blocks")
	flag.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "tokens per KV block")
	flag.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", cfg.MaxNumSeqs, "maximum running sequences")
	flag.IntVar(&cfg.MaxNumBatchedTokens, "max-num-batched-tokens", cfg.MaxNumBatchedTokens, "token budget per step")
	flag.DurationVar(&cfg.StepBase, "step-base", cfg.StepBase, "fixed duration of a step")
	flag.DurationVar(&cfg.PrefillPerToken, "prefill-per-token", cfg.PrefillPerToken, "step duration per prefill token")
	flag.DurationVar(&cfg.DecodePerSeq, "decode-per-seq", cfg.DecodePerSeq, "step duration per decoding sequence")
	flag.DurationVar(&cfg.FrontendBase, "frontend-base", cfg.FrontendBase, "API server latency per request")
	flag.DurationVar(&cfg.FrontendPerToken, "frontend-per-token", cfg.FrontendPerToken, "API server latency per prompt token")
	flag.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", cfg.DefaultMaxTokens, "output tokens when a request sets no limit")
	flag.IntVar(&cfg.MeanOutputTokens, "mean-output-tokens", cfg.MeanOutputTokens, "mean output length of requests without ignore_eos (0: always max tokens)")
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("unexpected arguments %q", flag.Args())
	}
	if *n < 1 {
		log.Fatalf("invalid -n %d: must be at least 1", *n)
	}
	if *port < 0 || *port > 0 && *port+*n-1 > 65535 {
		log.Fatalf("invalid -port %d: %d engines need ports up to %d", *port, *n, *port+*n-1)
	}

	addrs := make([]string, *n)
	for i := range addrs {
		p := 0
		if *port > 0 {
			p = *port + i
		}
		addrs[i] = net.JoinHostPort(*host, strconv.Itoa(p))
	}
	fleet, err := engine.StartFleetAt(addrs, cfg)
	if err != nil {
		log.Fatal(err)
	}
	for i, addr := range fleet.Addrs() {
		fmt.Printf("engine %d: http://%s\n", i, addr)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var tick <-chan time.Time
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		tick = t.C
	}
wait:
	for {
		select {
		case <-tick:
			printStats(fleet)
		case <-ctx.Done():
			break wait
		}
	}
	fleet.Close()
	printStats(fleet)
}

func printStats(f *engine.Fleet) {
	for i, s := range f.Stats() {
		fmt.Printf("engine %d: %d requests (%d finished, %d aborted), prompt %d tokens, cached %d (%.1f%%), generated %d, preemptions %d, running %d (max %d), waiting %d (max %d)\n",
			i, s.Requests, s.Finished, s.Aborted, s.PromptTokens, s.CachedTokens, 100*s.HitRate(),
			s.GeneratedTokens, s.Preemptions, s.Running, s.MaxRunning, s.Waiting, s.MaxWaiting)
	}
}
