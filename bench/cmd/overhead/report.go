package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// printReport prints the tables: throughput and latency, medians over
// rounds, and the routing check.
func printReport(cfg config, rows []row) {
	fmt.Printf("## Throughput (%d connections): medians over rounds\n\n", cfg.conns)
	fmt.Printf("| body | %s req/s | %s req/s | ratio (median of rounds) | ratios per round | Caddy CPU µs/req %s | %s | CPU ratio | errors |\n", policies[0], policies[1], short[0], short[1])
	fmt.Printf("|---|---:|---:|---:|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		var per []string
		for _, x := range r.thrRatio {
			per = append(per, fmt.Sprintf("%.3f", x))
		}
		fmt.Printf("| %s (%d B) | %.0f | %.0f | **%.3f** | %s | %.1f | %.1f | %.3f | %d |\n",
			sizeName(r.size), r.body, median(reqsOf(r.thr[0])), median(reqsOf(r.thr[1])), median(r.thrRatio), strings.Join(per, " "),
			median(cpuOf(r.thr[0])), median(cpuOf(r.thr[1])), median(r.cpuRat), errorsOf(r.thr[0])+errorsOf(r.thr[1]))
	}
	fmt.Printf("\n## Latency (1 connection, no queueing): medians over rounds\n\n")
	fmt.Printf("| body | %[1]s p50 | %[2]s p50 | added p50 | %[1]s p99 | %[2]s p99 | added p99 (median of rounds) | added p99 per round |\n", short[0], short[1])
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		var per []string
		for _, d := range r.p99Delt {
			per = append(per, us(d))
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | **%s** | %s |\n", sizeName(r.size),
			us(medianDur(p50Of(r.lat[0]))), us(medianDur(p50Of(r.lat[1]))), us(medianDur(r.p50Delta)),
			us(medianDur(p99Of(r.lat[0]))), us(medianDur(p99Of(r.lat[1]))), us(medianDur(r.p99Delt)), strings.Join(per, " "))
	}
	fmt.Printf("\n## Routing check (one pass over the conversations, then a second)\n\n")
	for _, r := range rows {
		fmt.Printf("- %s: reasons %v\n", sizeName(r.size), r.reasons)
	}
}

func cpuPerReq(r result) float64 { return r.caddyCPU / float64(max(r.requests, 1)) }

func reqsOf(rs []result) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, r.reqs)
	}
	return out
}

func cpuOf(rs []result) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, 1e6*cpuPerReq(r))
	}
	return out
}

func errorsOf(rs []result) int {
	n := 0
	for _, r := range rs {
		n += r.errors
	}
	return n
}

func p50Of(rs []result) []time.Duration {
	var out []time.Duration
	for _, r := range rs {
		out = append(out, r.p50)
	}
	return out
}

func p99Of(rs []result) []time.Duration {
	var out []time.Duration
	for _, r := range rs {
		out = append(out, r.p99)
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/1e3) }
