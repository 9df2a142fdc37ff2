package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	"github.com/prefixcache/caddy-prefixcache/bench/workload"
)

// Smoke runs the whole pipeline in a few seconds: 4 small engines behind
// Caddy configured from caddyfile, round_robin and prefix_cache on a small
// shared-prefix workload and a small multi-turn chat workload, upper bound
// included. It returns the results and an error if any figure is missing
// (see Check). It checks the pipeline, not the benchmark's targets.
func Smoke(ctx context.Context, caddyfile []byte, progress io.Writer) ([]*Result, error) {
	return SmokeWith(ctx, caddyfile, progress, SmokeOptions{})
}

// SmokeOptions vary the edge tier of a smoke run (see Config).
type SmokeOptions struct {
	Edges         int
	EdgeProcesses bool
	EdgeSeed      uint64
	EdgesSent     int
	Sync          string
}

// SmokeWith is Smoke with the edge tier of o.
func SmokeWith(ctx context.Context, caddyfile []byte, progress io.Writer, o SmokeOptions) ([]*Result, error) {
	ecfg := engine.DefaultConfig()
	ecfg.KVBlocks = 1024
	ecfg.TimeScale = 0.2
	policies, err := ParsePolicies("round_robin,prefix_cache")
	if err != nil {
		return nil, err
	}
	cfg := Config{
		Engines:        4,
		Engine:         ecfg,
		Caddyfile:      caddyfile,
		Policies:       policies,
		QPS:            []float64{20},
		SampleInterval: 100 * time.Millisecond,
		Progress:       progress,

		Edges:         o.Edges,
		EdgeProcesses: o.EdgeProcesses,
		EdgeSeed:      o.EdgeSeed,
		EdgesSent:     o.EdgesSent,
		Sync:          o.Sync,
	}

	shared, err := workload.SharedPrefix{
		Groups: 8, PromptsPerGroup: 3, SystemTokens: 600, QuestionTokens: 100,
		OutputTokens: 16, Requests: 100, Seed: 1,
	}.Generate()
	if err != nil {
		return nil, err
	}
	chat := workload.Chat{
		Conversations: 12, Apps: 2, SystemTokens: 400, UserTokens: 50, OutputTokens: 16,
		MinTurns: 2, MaxTurns: 4, Think: 200 * time.Millisecond, Seed: 1,
	}
	cw, err := chat.Generate()
	if err != nil {
		return nil, err
	}

	var results []*Result
	var errs []error
	for _, w := range []*workload.Workload{shared, cw} {
		w.Model = ecfg.Model
		res, err := Benchmark(ctx, cfg, w)
		if err != nil {
			return results, fmt.Errorf("%s: %w", w.Name, err)
		}
		results = append(results, res)
		if err := Check(res); err != nil {
			errs = append(errs, err)
		}
		if res.Bound == nil || res.Bound.HitRate <= 0 {
			errs = append(errs, fmt.Errorf("%s: no upper bound", w.Name))
		}
	}
	return results, errors.Join(errs...)
}
