package main

import (
	"math"
	"strings"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

func run(policy string, hit, p90 float64) *driver.Run {
	r := &driver.Run{Policy: policy, QPS: 20, HitRate: hit}
	r.TTFT.P90 = p90
	return r
}

func TestTable(t *testing.T) {
	results := []*driver.Result{
		{Workload: "agent", Bound: &driver.Bound{HitRate: 0.86}, Runs: []*driver.Run{
			run("prefix_cache", 0.80, 0.5), run("peer_a", 0.70, 0.4), run("peer_b", 0.78, 0.9)}},
		{Workload: "agent", Bound: &driver.Bound{HitRate: 0.88}, Runs: []*driver.Run{
			run("prefix_cache", 0.76, 0.7), run("peer_a", 0.72, 0.6), run("peer_b", 0.82, 1.1)}},
	}
	// The timer lag column: the machine's starvation during each run.
	results[0].Runs[0].TimerLag.P99, results[1].Runs[0].TimerLag.P99 = 2, 4
	var b strings.Builder
	if err := write(&b, summaries(group(results, nil)), verdictRule{lead: "prefix_cache", reference: "peer_a", minRuns: 2}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"### agent, 20 QPS (2 repeats; upper bound 0.870 [0.860–0.880])",
		"| prefix_cache | 2 | 0.780 [0.760–0.800] | 0.00 | 0.60 [0.50–0.70] | 0 | 0.00 | 0 | 3.0 [2.0–4.0] |",
		// Two runs: the differences are shown, no verdict (5 needed).
		"| peer_a (reference) | +0.070 [+0.040, +0.100] 2+/0− | too few runs (2, 5 needed) |",
		"| peer_b | -0.020 [-0.060, +0.020] 1+/1− | too few runs (2, 5 needed) | +0.0000 [+0.0000, +0.0000] 0+/0− | -0.4000 [-0.4000, -0.4000] 0+/2− |",
		"| agent, 20 QPS |  |  |  |  |  |  | peer_a (reference): too few runs (2, 5 needed), peer_b: too few runs (2, 5 needed) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestEngineTTFTColumn: the engines' own TTFT p90 is a column where
// every run of the cell measured it, and absent in older results.
func TestEngineTTFTColumn(t *testing.T) {
	measured := func(policy string, hit, p90, engine float64) *driver.Run {
		r := run(policy, hit, p90)
		r.EngineTTFT.P90 = engine
		return r
	}
	results := []*driver.Result{
		{Workload: "chat", Runs: []*driver.Run{measured("prefix_cache", 0.9, 0.05, 0.04), measured("peer_a", 0.8, 0.07, 0.06)}},
		{Workload: "chat", Runs: []*driver.Run{measured("prefix_cache", 0.9, 0.05, 0.02), measured("peer_a", 0.8, 0.07, 0.06)}},
		{Workload: "agent", Runs: []*driver.Run{measured("prefix_cache", 0.8, 0.5, 0.4), run("peer_a", 0.7, 0.6)}},
	}
	var b strings.Builder
	if err := write(&b, summaries(group(results, nil)), verdictRule{lead: "prefix_cache"}); err != nil {
		t.Fatal(err)
	}
	chat, agent, _ := strings.Cut(b.String(), "### agent")
	for _, want := range []string{
		"| policy | runs | hit rate | TTFT p50 (s) | TTFT p90 (s) | engine TTFT p90 (s) | errors |",
		"| prefix_cache | 2 | 0.900 | 0.00 | 0.05 | 0.03 [0.02–0.04] | 0 |",
		"| peer_a | 2 | 0.800 | 0.00 | 0.07 | 0.06 | 0 |",
	} {
		if !strings.Contains(chat, want) {
			t.Errorf("chat lacks %q:\n%s", want, chat)
		}
	}
	if strings.Contains(agent, "engine TTFT") {
		t.Errorf("agent, where peer_a did not measure it, has the engine TTFT column:\n%s", agent)
	}
}

// runs returns one result per pair of (lead, other) figures, hit rate
// and TTFT p90 alike.
func runs(workload string, lead, other []float64) []*driver.Result {
	var rs []*driver.Result
	for k := range max(len(lead), len(other)) {
		var r driver.Result
		r.Workload = workload
		if k < len(lead) {
			r.Runs = append(r.Runs, run("prefix_cache", lead[k], lead[k]))
		}
		if k < len(other) {
			r.Runs = append(r.Runs, run("peer_a", other[k], other[k]))
		}
		rs = append(rs, &r)
	}
	return rs
}

// TestBootstrap checks the interval on differences whose resampled
// means follow a binomial law: of d = {0, 0, 0, 0, 1}, a resample's mean
// is k/5 with k ~ Binomial(5, 0.2), P(k = 0) = 0.328 (so the 2.5th
// percentile is 0) and P(k <= 2) = 0.942 < 0.975 < P(k <= 3) = 0.993 (so
// the 97.5th is 0.6). The interval touches zero: a tie.
func TestBootstrap(t *testing.T) {
	d := bootstrap([]float64{0, 0, 0, 0, 1})
	if d.n != 5 || d.mean != 0.2 || d.lo != 0 || math.Abs(d.hi-0.6) > 1e-12 || d.pos != 1 || d.neg != 0 {
		t.Errorf("bootstrap({0,0,0,0,1}) = %+v, want mean 0.2, interval [0, 0.6], 1+/0-", d)
	}
	if got := judge(d, true); got != tie {
		t.Errorf("judge(%+v, higher) = %v, want tie", d, got)
	}
	if again := bootstrap([]float64{0, 0, 0, 0, 1}); again != d {
		t.Errorf("bootstrap is not deterministic: %+v then %+v", d, again)
	}
	// Constant differences: every resample has their mean.
	if d := bootstrap([]float64{0.05, 0.05, 0.05, 0.05, 0.05}); math.Abs(d.lo-0.05) > 1e-12 || math.Abs(d.hi-0.05) > 1e-12 {
		t.Errorf("bootstrap of constant 0.05 = %+v, want [0.05, 0.05]", d)
	}
}

// TestPairedVerdicts: a cell that must lead, one that must tie, one with
// too few runs, one unpaired, each through the whole table.
func TestPairedVerdicts(t *testing.T) {
	tests := []struct {
		name         string
		lead, other  []float64
		hit, p90     string // the verdict words
		wantHitDelta string
	}{
		// The lead's hit rate (and so its TTFT p90, the same figures)
		// is above the other's by 0.05 in every pair: the interval is
		// [+0.05, +0.05], it leads on hit rate and is behind on TTFT.
		{"lead", []float64{0.80, 0.81, 0.82, 0.83, 0.84}, []float64{0.75, 0.76, 0.77, 0.78, 0.79}, "leads", "behind", "+0.050 [+0.050, +0.050] 5+/0−"},
		// +0.1, −0.1, +0.1, −0.1, +0.1: the mean is +0.02, but a
		// resample of three or more −0.1 (P = 0.087 > 0.025) has a
		// mean at most −0.02, so the interval holds zero.
		{"tie", []float64{0.6, 0.4, 0.6, 0.4, 0.6}, []float64{0.5, 0.5, 0.5, 0.5, 0.5}, "tie", "tie", "+0.020 ["},
		// Above in every one of four pairs, but four are too few.
		{"too few", []float64{0.80, 0.81, 0.82, 0.83}, []float64{0.70, 0.71, 0.72, 0.73}, "too few runs (4, 5 needed)", "too few runs (4, 5 needed)", "+0.100 [+0.100, +0.100] 4+/0−"},
		{"unpaired", []float64{0.80, 0.81, 0.82, 0.83, 0.84}, []float64{0.70, 0.71, 0.72, 0.73}, "unpaired (5 and 4 runs)", "unpaired (5 and 4 runs)", "| peer_a | – |"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sums := summaries(group(runs("chat", tt.lead, tt.other), nil))
			cs := comparisons(sums[0], verdictRule{lead: "prefix_cache"})
			if len(cs) != 1 {
				t.Fatalf("comparisons = %+v, want one", cs)
			}
			if got := cs[0].word(cs[0].hitVerdict); got != tt.hit {
				t.Errorf("hit rate verdict %q, want %q (%+v)", got, tt.hit, cs[0].hit)
			}
			if got := cs[0].word(cs[0].p90Verdict); got != tt.p90 {
				t.Errorf("TTFT p90 verdict %q, want %q (%+v)", got, tt.p90, cs[0].p90)
			}
			var b strings.Builder
			if err := write(&b, sums, verdictRule{lead: "prefix_cache"}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.wantHitDelta) {
				t.Errorf("table lacks %q:\n%s", tt.wantHitDelta, b.String())
			}
		})
	}

	// The summary table puts each policy under its verdicts.
	var b strings.Builder
	results := append(runs("chat", []float64{0.80, 0.81, 0.82, 0.83, 0.84}, []float64{0.75, 0.76, 0.77, 0.78, 0.79}),
		runs("agent", []float64{0.6, 0.4, 0.6, 0.4, 0.6}, []float64{0.5, 0.5, 0.5, 0.5, 0.5})...)
	if err := write(&b, summaries(group(results, nil)), verdictRule{lead: "prefix_cache"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| chat, 20 QPS | peer_a |  |  |  |  | peer_a |  |",
		"| agent, 20 QPS |  | peer_a |  |  | peer_a |  |  |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("verdicts lack %q:\n%s", want, b.String())
		}
	}

	// -min-runs raises the runs a verdict needs, never lowers them.
	if got := (verdictRule{minRuns: 1}).need(); got != MinPairs {
		t.Errorf("need() with -min-runs 1 = %d, want %d", got, MinPairs)
	}
	if got := (verdictRule{minRuns: 8}).need(); got != 8 {
		t.Errorf("need() with -min-runs 8 = %d, want 8", got)
	}
}

func TestTierName(t *testing.T) {
	for _, tt := range []struct {
		run  driver.Run
		want string
	}{
		{driver.Run{Policy: "prefix_cache"}, "prefix_cache e1"},
		{driver.Run{Policy: "prefix_cache", Edges: 1}, "prefix_cache e1"},
		{driver.Run{Policy: "prefix_cache", Edges: 1, EdgeProcesses: true}, "prefix_cache e1p"},
		{driver.Run{Policy: "prefix_cache", Edges: 1, EdgeProcesses: true, Sync: "redis"}, "prefix_cache e1p redis"},
		{driver.Run{Policy: "round_robin", Edges: 4, EdgeProcesses: true}, "round_robin e4"},
		{driver.Run{Policy: "prefix_cache", Edges: 8, EdgeProcesses: true, Sync: "redis"}, "prefix_cache e8 redis"},
		{driver.Run{Policy: "prefix_cache", Edges: 4, EdgesSent: 1, EdgeProcesses: true, Sync: "redis"}, "prefix_cache e4/1 redis"},
	} {
		if got := tierName(&tt.run); got != tt.want {
			t.Errorf("tierName(%+v) = %q, want %q", tt.run, got, tt.want)
		}
	}
}
