package main

import (
	"strings"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

// sweep returns five runs (files) of one cell with each setting's hit
// rate and TTFT p90 the same in every run, and hit rates of the variant
// named noisy alternating ±0.01 around its value.
func sweep(settings map[string][2]float64) []*driver.Result {
	var rs []*driver.Result
	for k := range 5 {
		r := &driver.Result{Workload: "chat"}
		for _, name := range []string{"r", "r-k-0.5", "r-k-2", "r-k-4"} {
			f, ok := settings[name]
			if !ok {
				continue
			}
			r.Runs = append(r.Runs, run(name, f[0], f[1]))
		}
		if f, ok := settings["noisy"]; ok {
			r.Runs = append(r.Runs, run("r-k-8", f[0]+0.01*float64(1-2*(k%2)), f[1]))
		}
		rs = append(rs, r)
	}
	return rs
}

func TestPick(t *testing.T) {
	tests := []struct {
		name     string
		settings map[string][2]float64 // hit rate, TTFT p90
		lo, hi   float64
		want     string // the script's lines
	}{
		{
			// 0.5 has the lowest TTFT but is behind the best hit
			// rate (2's) by 0.1 in every run; 4 ties the best's hit
			// rate and has a higher TTFT than 2: 2, interior.
			"interior", map[string][2]float64{"r": {0.80, 1.0}, "r-k-0.5": {0.70, 0.5}, "r-k-2": {0.81, 0.8}, "r-k-4": {0.81, 0.9}},
			0, 100, "picked: 2\nedge: none\n",
		},
		{
			// 4 at the top of the range: extended by the step to 2.
			"high edge", map[string][2]float64{"r": {0.80, 1.0}, "r-k-0.5": {0.70, 0.5}, "r-k-2": {0.81, 0.8}, "r-k-4": {0.81, 0.7}},
			0, 100, "picked: 4\nedge: high\nnext: 6\n",
		},
		{
			"high edge at the bound", map[string][2]float64{"r": {0.80, 1.0}, "r-k-0.5": {0.70, 0.5}, "r-k-2": {0.81, 0.8}, "r-k-4": {0.81, 0.7}},
			0, 5, "picked: 4\nedge: high\nnext: 5\n",
		},
		{
			"high edge on the bound", map[string][2]float64{"r": {0.80, 1.0}, "r-k-0.5": {0.70, 0.5}, "r-k-2": {0.81, 0.8}, "r-k-4": {0.81, 0.7}},
			0, 4, "picked: 4\nedge: high\n",
		},
		{
			// 0.5 is not behind now: the lowest value, extended
			// down by 0.5 to the bound 0.25.
			"low edge", map[string][2]float64{"r": {0.80, 1.0}, "r-k-0.5": {0.81, 0.5}, "r-k-2": {0.81, 0.8}, "r-k-4": {0.81, 0.7}},
			0.25, 100, "picked: 0.5\nedge: low\nnext: 0.25\n",
		},
		{
			// All alike: the default (1), between 0.5 and 4.
			"tie goes to the default", map[string][2]float64{"r": {0.8, 1.0}, "r-k-0.5": {0.8, 1.0}, "r-k-2": {0.8, 1.0}, "r-k-4": {0.8, 1.0}},
			0, 100, "picked: 1\nedge: none\n",
		},
		{
			// 8's hit rate is 0.81 or 0.79 (mean 0.802, the best's
			// less 0, 0.02, 0, 0.02, 0): not behind by the
			// interval, whose top is 0, and the fastest.
			"noise is not behind", map[string][2]float64{"r": {0.80, 1.0}, "r-k-2": {0.81, 0.8}, "noisy": {0.80, 0.6}},
			0, 100, "picked: 8\nedge: high\nnext: 14\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := pickSetting(sweep(tt.settings), "r", "k", "1", tt.lo, tt.hi)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			writePick(&b, "k", p)
			if !strings.HasSuffix(b.String(), "\n\n"+tt.want) {
				t.Errorf("pick of %v ends:\n%s\nwant:\n%s", tt.settings, b.String(), tt.want)
			}
		})
	}
}

// TestPickNamed: a knob whose default is a name is categorical: its
// variants are named, the rule picks among them alike, and the range
// is never extended, even from a value at its edge.
func TestPickNamed(t *testing.T) {
	var rs []*driver.Result
	for range 5 {
		r := &driver.Result{Workload: "chat"}
		r.Runs = append(r.Runs, run("r", 0.80, 1.0), run("r-choice-rules", 0.80, 0.8), run("r-choice-other", 0.70, 0.5))
		rs = append(rs, r)
	}
	p, err := pickSetting(rs, "r", "choice", "cost", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writePick(&b, "choice", p)
	// other is behind on hit rate; rules ties it and is faster.
	if want := "\n\npicked: rules\nedge: none\n"; !strings.HasSuffix(b.String(), want) {
		t.Errorf("pick ends:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, row := range []string{"| r | cost |", "| r-choice-other | other |", "| r-choice-rules | rules |"} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("pick table:\n%s\nwant a row %q", b.String(), row)
		}
	}
}

func TestPickErrors(t *testing.T) {
	rs := sweep(map[string][2]float64{"r": {0.8, 1}, "r-k-2": {0.8, 1}})
	rs[0].Runs = rs[0].Runs[:1] // one run of r-k-2 fewer
	if _, err := pickSetting(rs, "r", "k", "1", 0, 10); err == nil || !strings.Contains(err.Error(), "not paired") {
		t.Errorf("unpaired sweep: error %v, want not paired", err)
	}
	if _, err := pickSetting(sweep(map[string][2]float64{"r": {0.8, 1}}), "r", "k", "1", 0, 10); err == nil {
		t.Errorf("a sweep without variants: no error")
	}
	bad := sweep(map[string][2]float64{"r": {0.8, 1}})
	bad[0].Runs = append(bad[0].Runs, run("r-k-fast", 0.9, 1))
	if _, err := pickSetting(bad, "r", "k", "1", 0, 10); err == nil {
		t.Errorf("a variant named r-k-fast: no error")
	}
	for _, s := range []string{"1", "2,1", "a,b"} {
		if _, _, err := parseRange(s); err == nil {
			t.Errorf("parseRange(%q): no error", s)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{192: "192", 4194304: "4194304", 0.7 + 0.2: "0.9", 1.25: "1.25", 0: "0"} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
}
