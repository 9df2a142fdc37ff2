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

func TestTableAndVerdict(t *testing.T) {
	results := []*driver.Result{
		{Workload: "agent", Bound: &driver.Bound{HitRate: 0.86}, Runs: []*driver.Run{
			run("prefix_cache", 0.80, 0.5), run("peer_a", 0.70, 0.4), run("peer_b", 0.78, 0.9)}},
		{Workload: "agent", Bound: &driver.Bound{HitRate: 0.88}, Runs: []*driver.Run{
			run("prefix_cache", 0.76, 0.7), run("peer_a", 0.72, 0.6), run("peer_b", 0.82, 1.1)}},
	}
	var b strings.Builder
	if err := write(&b, summaries(group(results, nil)), "prefix_cache"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"### agent, 20 QPS (2 repeats; upper bound 0.870 [0.860–0.880])",
		"| prefix_cache | 0.780 [0.760–0.800] | 0.00 | 0.60 [0.50–0.70] | 0 |",
		// peer_b's mean hit rate (0.800) beats 0.780, but the ranges overlap.
		"hit rate: prefix_cache within spread of peer_b",
		// peer_a's TTFT p90 (0.5) beats 0.6 and the ranges overlap.
		"TTFT p90: prefix_cache within spread of peer_a",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// Disjoint ranges are "behind"; a better mean "leads".
	results[1].Runs[2].HitRate = 0.99
	results[0].Runs[2].HitRate = 0.95
	results[0].Runs[1].TTFT.P90, results[1].Runs[1].TTFT.P90 = 0.9, 0.95
	b.Reset()
	write(&b, summaries(group(results, []string{"prefix_cache", "peer_a", "peer_b"})), "prefix_cache")
	out = b.String()
	for _, want := range []string{"hit rate: prefix_cache behind peer_b", "TTFT p90: prefix_cache leads peer_a"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
