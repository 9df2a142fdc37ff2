package main

import (
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
	var b strings.Builder
	if err := write(&b, summaries(group(results, nil)), verdictRule{lead: "prefix_cache", reference: "peer_a"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"### agent, 20 QPS (2 repeats; upper bound 0.870 [0.860–0.880])",
		"| prefix_cache | 2 | 0.780 [0.760–0.800] | 0.00 | 0.60 [0.50–0.70] | 0 |",
		// peer_b's mean hit rate (0.800) beats 0.780, but the ranges overlap.
		"hit rate: prefix_cache tie within spread with peer_b",
		// peer_a's TTFT p90 (0.5) beats 0.6 and the ranges overlap.
		"TTFT p90: prefix_cache tie within spread with peer_a",
		// The reference line: hit rates [0.76–0.80] and [0.70–0.72] do not overlap.
		"Against the reference: hit rate: prefix_cache leads peer_a",
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

// TestCompare pins the symmetric rule: "leads" and "behind" only for
// disjoint ranges, in both directions and for both senses of better,
// "tie within spread" for any overlap (touching included) whichever mean
// is better, and no verdict below the runs a cell needs.
func TestCompare(t *testing.T) {
	hit, ttft := figures[0], figures[1]
	mk := func(policy string, runs int, lo, hi float64) row {
		s := stat{mean: (lo + hi) / 2, lo: lo, hi: hi}
		return row{policy: policy, runs: runs, hit: s, p90: s}
	}
	tests := []struct {
		name  string
		fig   figure
		lead  row
		other row
		need  int
		want  string
	}{
		{"hit: lead's range above", hit, mk("pc", 3, 0.80, 0.82), mk("x", 3, 0.70, 0.79), 1, "pc leads x"},
		{"hit: lead's range below", hit, mk("pc", 3, 0.70, 0.79), mk("x", 3, 0.80, 0.82), 1, "pc behind x"},
		{"hit: overlap, lead's mean better", hit, mk("pc", 3, 0.75, 0.85), mk("x", 3, 0.70, 0.76), 1, "pc tie within spread with x"},
		{"hit: overlap, lead's mean worse", hit, mk("pc", 3, 0.70, 0.76), mk("x", 3, 0.75, 0.85), 1, "pc tie within spread with x"},
		{"hit: ranges touch", hit, mk("pc", 3, 0.76, 0.80), mk("x", 3, 0.70, 0.76), 1, "pc tie within spread with x"},
		{"TTFT: lead's range lower leads", ttft, mk("pc", 3, 0.2, 0.3), mk("x", 3, 0.4, 0.5), 1, "pc leads x"},
		{"TTFT: lead's range higher is behind", ttft, mk("pc", 3, 0.4, 0.5), mk("x", 3, 0.2, 0.3), 1, "pc behind x"},
		{"TTFT: overlap", ttft, mk("pc", 3, 0.25, 0.45), mk("x", 3, 0.2, 0.3), 1, "pc tie within spread with x"},
		{"too few runs of the lead", hit, mk("pc", 4, 0.80, 0.82), mk("x", 5, 0.70, 0.79), 5, "no verdict on pc vs x, 4 and 5 runs, 5 needed"},
		{"too few runs of the other", hit, mk("pc", 5, 0.70, 0.71), mk("x", 1, 0.80, 0.80), 5, "no verdict on pc vs x, 5 and 1 runs, 5 needed"},
		{"enough runs", hit, mk("pc", 5, 0.80, 0.82), mk("x", 5, 0.70, 0.79), 5, "pc leads x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compare(tt.fig, tt.lead, tt.other, tt.need); !strings.Contains(got, tt.want) {
				t.Errorf("compare(%s, %+v, %+v, %d) = %q, want it to say %q", tt.fig.name, tt.lead, tt.other, tt.need, got, tt.want)
			}
		})
	}
}

// TestMooncakeNeedsFiveRuns checks that Mooncake cells need 5 runs
// whatever -min-runs says, and others -min-runs.
func TestMooncakeNeedsFiveRuns(t *testing.T) {
	tests := []struct {
		workload string
		minRuns  int
		want     int
	}{
		{"mooncake", 1, 5},
		{"mooncake-synthetic", 3, 5},
		{"mooncake", 8, 8},
		{"shared-prefix", 1, 1},
		{"agent", 3, 3},
	}
	for _, tt := range tests {
		if got := (verdictRule{minRuns: tt.minRuns}).needRuns(tt.workload); got != tt.want {
			t.Errorf("needRuns(%q) with -min-runs %d = %d, want %d", tt.workload, tt.minRuns, got, tt.want)
		}
	}
	results := make([]*driver.Result, 4)
	for i := range results {
		results[i] = &driver.Result{Workload: "mooncake", Runs: []*driver.Run{run("prefix_cache", 0.30+float64(i)/1000, 1), run("peer_a", 0.20, 1)}}
	}
	var b strings.Builder
	write(&b, summaries(group(results, nil)), verdictRule{lead: "prefix_cache", minRuns: 1})
	if out := b.String(); !strings.Contains(out, "hit rate: no verdict on prefix_cache vs peer_a, 4 and 4 runs, 5 needed") {
		t.Errorf("a 4-run Mooncake cell gave a verdict:\n%s", out)
	}
	results = append(results, &driver.Result{Workload: "mooncake", Runs: []*driver.Run{run("prefix_cache", 0.31, 1), run("peer_a", 0.2, 1)}})
	b.Reset()
	write(&b, summaries(group(results, nil)), verdictRule{lead: "prefix_cache", minRuns: 1})
	if out := b.String(); !strings.Contains(out, "hit rate: prefix_cache leads peer_a") {
		t.Errorf("a 5-run Mooncake cell gave no verdict:\n%s", out)
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
