// Package report renders benchmark results (bench/driver) for people and
// machines: a markdown table per workload, JSON, and an SVG chart of TTFT
// p90 and token hit rate against load, one line per policy.
package report
