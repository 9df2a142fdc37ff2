// Command peertable summarises repeated prefixbench runs: it reads the
// -json files given as arguments (one per seed or repeat), groups the runs
// by workload, load and policy, and prints one markdown table per workload
// and load with each figure's mean and its range over the repeats, then
// says for each figure whether prefix_cache leads the best peer.
//
//	go run ./bench/cmd/peertable -lead prefix_cache results/*.json
//
// "Leads" means its mean is at least the best other policy's; "within
// spread" means it is behind on the mean but the two ranges over the
// repeats overlap; "behind" means they do not.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

func main() {
	lead := flag.String("lead", "prefix_cache", "the policy whose lead is checked against every other")
	only := flag.String("policies", "", "comma-separated policies to show, in this order (default: all, in first-seen order)")
	rename := flag.String("rename", "", "comma-separated old=new policy names to show runs under, e.g. 'prefix_cache=pc_256k,pc_128k=prefix_cache' (applied before -policies and -lead)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: peertable [-lead policy] [-policies a,b] result.json...")
		os.Exit(2)
	}
	var all []*driver.Result
	for _, name := range flag.Args() {
		rs, err := readResults(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "peertable:", err)
			os.Exit(1)
		}
		all = append(all, rs...)
	}
	if *rename != "" {
		names := map[string]string{}
		for _, pair := range strings.Split(*rename, ",") {
			old, name, ok := strings.Cut(pair, "=")
			if !ok {
				fmt.Fprintf(os.Stderr, "peertable: -rename %q: want old=new\n", pair)
				os.Exit(2)
			}
			names[old] = name
		}
		for _, res := range all {
			for _, r := range res.Runs {
				if name, ok := names[r.Policy]; ok {
					r.Policy = name
				}
			}
		}
	}
	var order []string
	if *only != "" {
		order = strings.Split(*only, ",")
	}
	if err := write(os.Stdout, group(all, order), *lead); err != nil {
		fmt.Fprintln(os.Stderr, "peertable:", err)
		os.Exit(1)
	}
}

func readResults(name string) ([]*driver.Result, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []*driver.Result
	if err := json.NewDecoder(f).Decode(&rs); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return rs, nil
}

// cell is one workload at one load.
type cell struct {
	workload string
	load     string
	bounds   []float64 // upper bound hit rate, per repeat that had one
	policies []string  // in display order
	runs     map[string][]*driver.Run
}

func loadName(r *driver.Run) string {
	if r.Users > 0 {
		return fmt.Sprintf("%d users", r.Users)
	}
	return fmt.Sprintf("%g QPS", r.QPS)
}

// group collects the runs of every result by workload and load, keeping
// the order in which cells and policies first appear (or order, for the
// policies, when given).
func group(results []*driver.Result, order []string) []*cell {
	var cells []*cell
	find := func(w, l string) *cell {
		for _, c := range cells {
			if c.workload == w && c.load == l {
				return c
			}
		}
		c := &cell{workload: w, load: l, runs: map[string][]*driver.Run{}}
		cells = append(cells, c)
		return c
	}
	for _, res := range results {
		seen := map[*cell]bool{}
		for _, r := range res.Runs {
			c := find(res.Workload, loadName(r))
			if !seen[c] && res.Bound != nil {
				c.bounds = append(c.bounds, res.Bound.HitRate)
				seen[c] = true
			}
			if len(order) > 0 && !slices.Contains(order, r.Policy) {
				continue
			}
			if _, ok := c.runs[r.Policy]; !ok && len(order) == 0 {
				c.policies = append(c.policies, r.Policy)
			}
			c.runs[r.Policy] = append(c.runs[r.Policy], r)
		}
	}
	if len(order) > 0 {
		for _, c := range cells {
			for _, p := range order {
				if len(c.runs[p]) > 0 {
					c.policies = append(c.policies, p)
				}
			}
		}
	}
	return cells
}

// stat is a figure over the repeats.
type stat struct{ mean, lo, hi float64 }

func over(runs []*driver.Run, f func(*driver.Run) float64) stat {
	vs := make([]float64, len(runs))
	for i, r := range runs {
		vs[i] = f(r)
	}
	return summarize(vs)
}

// summarize returns the mean and range of vs (not empty).
func summarize(vs []float64) stat {
	s := stat{lo: math.Inf(1), hi: math.Inf(-1)}
	for _, v := range vs {
		s.mean += v
		s.lo, s.hi = min(s.lo, v), max(s.hi, v)
	}
	s.mean /= float64(len(vs))
	return s
}

func (s stat) format(digits int) string {
	if s.lo == s.hi {
		return fmt.Sprintf("%.*f", digits, s.mean)
	}
	return fmt.Sprintf("%.*f [%.*f–%.*f]", digits, s.mean, digits, s.lo, digits, s.hi)
}

// imbalance is the requests served by the busiest engine over the mean.
func imbalance(r *driver.Run) float64 {
	total, most := 0, 0
	for _, e := range r.Engines {
		total += e.Requests
		most = max(most, e.Requests)
	}
	if total == 0 {
		return 0
	}
	return float64(most) * float64(len(r.Engines)) / float64(total)
}

func preemptions(r *driver.Run) float64 {
	var n int64
	for _, e := range r.Engines {
		n += e.Preemptions
	}
	return float64(n)
}

func write(w io.Writer, cells []*cell, lead string) error {
	for _, c := range cells {
		n := 0
		for _, p := range c.policies {
			n = max(n, len(c.runs[p]))
		}
		runs := fmt.Sprintf("%d repeats", n)
		if n == 1 {
			runs = "1 run"
		}
		fmt.Fprintf(w, "### %s, %s (%s", c.workload, c.load, runs)
		if len(c.bounds) > 0 {
			fmt.Fprintf(w, "; upper bound %s", summarize(c.bounds).format(3))
		}
		fmt.Fprintf(w, ")\n\n")
		fmt.Fprintln(w, "| policy | hit rate | TTFT p50 (s) | TTFT p90 (s) | errors | requests max/mean | preemptions |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
		for _, p := range c.policies {
			runs := c.runs[p]
			errs := 0
			for _, r := range runs {
				errs += r.Errors
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s | %s |\n", p,
				over(runs, func(r *driver.Run) float64 { return r.HitRate }).format(3),
				over(runs, func(r *driver.Run) float64 { return r.TTFT.P50 }).format(2),
				over(runs, func(r *driver.Run) float64 { return r.TTFT.P90 }).format(2),
				errs,
				over(runs, imbalance).format(2),
				over(runs, preemptions).format(0))
		}
		if v := verdict(c, lead); v != "" {
			fmt.Fprintf(w, "\n%s\n", v)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// verdict compares lead with the best other policy on hit rate (higher is
// better) and TTFT p90 (lower is better).
func verdict(c *cell, lead string) string {
	mine := c.runs[lead]
	if len(mine) == 0 || len(c.policies) < 2 {
		return ""
	}
	figures := []struct {
		name   string
		f      func(*driver.Run) float64
		higher bool
	}{
		{"hit rate", func(r *driver.Run) float64 { return r.HitRate }, true},
		{"TTFT p90", func(r *driver.Run) float64 { return r.TTFT.P90 }, false},
	}
	var parts []string
	for _, fig := range figures {
		m := over(mine, fig.f)
		best, bs := "", stat{}
		for _, p := range c.policies {
			if p == lead {
				continue
			}
			s := over(c.runs[p], fig.f)
			if best == "" || (fig.higher && s.mean > bs.mean) || (!fig.higher && s.mean < bs.mean) {
				best, bs = p, s
			}
		}
		var word string
		switch {
		case (fig.higher && m.mean >= bs.mean) || (!fig.higher && m.mean <= bs.mean):
			word = "leads"
		case m.lo <= bs.hi && bs.lo <= m.hi:
			word = "within spread of"
		default:
			word = "behind"
		}
		parts = append(parts, fmt.Sprintf("%s: %s %s %s (%s vs %s)", fig.name, lead, word, best,
			m.format(3), bs.format(3)))
	}
	return strings.Join(parts, "; ") + "."
}
