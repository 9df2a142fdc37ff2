// Command peertable summarises repeated prefixbench runs: it reads the
// -json files given as arguments (one per seed or repeat), groups the runs
// by workload, load and policy, and prints one markdown table per workload
// and load with each figure's mean and its range over the repeats, then
// how the -lead policy compares with every other, run by run; -reference
// marks the reference policy (e.g. peer_dynamo, which knows every
// engine's cache).
//
//	go run ./bench/cmd/peertable -lead prefix_cache -reference peer_dynamo results/*.json
//
// Below each cell's table, every other policy is paired with the lead,
// run by run (the k-th run of each, in the order the files are given: one
// file holds every policy of a seed on the same arrivals), and the table
// gives the mean paired difference lead − other of hit rate and TTFT
// p50/p90/p99 with its 95% paired bootstrap interval (10,000 resamples,
// a fixed RNG seed) and the signs of the differences. The lead "leads" or
// is "behind" on hit rate or TTFT p90 only when the interval excludes
// zero, and ties otherwise; a cell gives no verdict, and says so, with
// fewer than 5 runs per policy (or -min-runs, if more), or with different
// numbers of runs of the two policies. The output ends with every cell's
// verdicts in one table.
//
// With -svg FILE it also writes a self-contained SVG chart of the same
// summaries: a row per workload and load, with token hit rate (the upper
// bound dashed) and TTFT p90 per policy as bars at the mean with a whisker
// over the range, the -lead policy in colour.
//
//	go run ./bench/cmd/peertable -svg peers.svg results/*.json
//
// With -pick POLICY -knob KNOB -default V [-range lo,hi] it picks a
// tuning sweep's value of KNOB instead, by the rule of pick.go (and
// docs/peers.md, "Tuning"), and says whether the range must be extended:
//
//	go run ./bench/cmd/peertable -pick peer_sglang -knob cache_threshold -default 0.3 -range 0,1 tuning/*.json
//
// With -frontier POLICY -knob KNOB -default V it prints the frontier of
// frontier.go instead: POLICY's KNOB swept beside every other policy's
// settings, as points of mean hit rate and TTFT p90 per cell, and the
// peer settings that get both a higher hit rate and a lower TTFT p90
// than one of POLICY's, paired run by run; -svg draws the points:
//
//	go run ./bench/cmd/peertable -frontier prefix_cache -knob cache_weight -default 2 -svg frontier.svg tuning/*.json
//
// With -tiers every run is shown under its policy and its edge tier
// (tierName: "prefix_cache e4 redis" is prefix_cache through 4 edges
// syncing over Redis), so that the files of bench/edges/run.sh compare
// the tiers against one edge:
//
//	go run ./bench/cmd/peertable -tiers -lead 'prefix_cache e1' bench/results/edges/*.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

func main() {
	lead := flag.String("lead", "prefix_cache", "the policy whose lead is checked against every other")
	reference := flag.String("reference", "", "also compare the lead with this policy, e.g. peer_dynamo (the precise reference)")
	minRuns := flag.Int("min-runs", MinPairs, "fewest paired runs per cell for a verdict (at least 5)")
	only := flag.String("policies", "", "comma-separated policies to show, in this order (default: all, in first-seen order)")
	rename := flag.String("rename", "", "comma-separated old=new policy names to show runs under, e.g. 'prefix_cache=pc_256k,pc_128k=prefix_cache' (applied before -policies and -lead)")
	svgPath := flag.String("svg", "", "also write the summaries as an SVG chart to this file")
	pickBase := flag.String("pick", "", "pick a tuning sweep's setting: the default setting's policy, beside variants named POLICY-KNOB-VALUE (see -knob, -default, -range)")
	pickKnob := flag.String("knob", "", "with -pick or -frontier: the knob swept")
	pickDefault := flag.String("default", "0", "with -pick or -frontier: the knob's value in the default setting (a name, not a number, for a categorical knob such as choice)")
	pickRange := flag.String("range", "-1e18,1e18", "with -pick: the knob's bounds lo,hi, which an extended range stays within (a categorical knob's is never extended)")
	frontierBase := flag.String("frontier", "", "the frontier of this policy's knob (see -knob, -default) beside every other policy's settings, instead of the tables; -svg draws it")
	tiers := flag.Bool("tiers", false, "show each run under its policy and edge tier, e.g. 'prefix_cache e4 redis' (applied before -rename)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: peertable [-lead policy] [-reference policy] [-min-runs n] [-policies a,b] [-rename old=new] [-tiers] [-svg chart.svg] result.json...\n       peertable -pick policy -knob knob -default value [-range lo,hi] result.json...\n       peertable -frontier policy -knob knob -default value [-min-runs n] [-svg chart.svg] result.json...")
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
	if *tiers {
		for _, res := range all {
			for _, r := range res.Runs {
				r.Policy = tierName(r)
			}
		}
	}
	if err := renamePolicies(all, *rename); err != nil {
		fmt.Fprintln(os.Stderr, "peertable:", err)
		os.Exit(2)
	}
	if *pickBase != "" {
		lo, hi, err := parseRange(*pickRange)
		if err == nil && *pickKnob == "" {
			err = fmt.Errorf("-pick needs -knob")
		}
		var p *pickResult
		if err == nil {
			p, err = pickSetting(all, *pickBase, *pickKnob, *pickDefault, lo, hi)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "peertable:", err)
			os.Exit(1)
		}
		writePick(os.Stdout, *pickKnob, p)
		return
	}
	if *frontierBase != "" {
		if err := frontierMain(all, *frontierBase, *pickKnob, *pickDefault, max(MinPairs, *minRuns), *svgPath); err != nil {
			fmt.Fprintln(os.Stderr, "peertable:", err)
			os.Exit(1)
		}
		return
	}
	var order []string
	if *only != "" {
		order = strings.Split(*only, ",")
	}
	sums := summaries(group(all, order))
	if err := write(os.Stdout, sums, verdictRule{lead: *lead, reference: *reference, minRuns: *minRuns}); err != nil {
		fmt.Fprintln(os.Stderr, "peertable:", err)
		os.Exit(1)
	}
	if *svgPath != "" {
		if err := writeFile(*svgPath, func(w io.Writer) error { return writeSVG(w, sums, *lead) }); err != nil {
			fmt.Fprintln(os.Stderr, "peertable:", err)
			os.Exit(1)
		}
	}
}

// frontierMain prints the frontier of base's knob, and draws it to
// svgPath if set.
func frontierMain(all []*driver.Result, base, knob, def string, need int, svgPath string) error {
	if knob == "" {
		return fmt.Errorf("-frontier needs -knob")
	}
	d, err := strconv.ParseFloat(def, 64)
	if err != nil {
		return fmt.Errorf("-frontier: the knob's default %q is not a number", def)
	}
	fs, err := frontiers(summaries(group(all, nil)), base, knob, d, need)
	if err != nil {
		return err
	}
	writeFrontiers(os.Stdout, fs, base, knob, need)
	if svgPath == "" {
		return nil
	}
	return writeFile(svgPath, func(w io.Writer) error { return writeFrontierSVG(w, fs, base, knob) })
}

// writeFile writes a file with write.
func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return f.Close()
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

// tierName names r's policy with its edge tier: the number of edges
// ("e4"), "p" when a single edge ran as a child process as N edges do,
// and what the edges synced through, if anything.
func tierName(r *driver.Run) string {
	name := fmt.Sprintf("%s e%d", r.Policy, max(r.Edges, 1))
	if r.Edges <= 1 && r.EdgeProcesses {
		name += "p"
	}
	if r.EdgesSent > 0 {
		name += fmt.Sprintf("/%d", r.EdgesSent) // e4/1: four edges, requests to one
	}
	if r.Sync != "" {
		name += " " + r.Sync
	}
	return name
}

// renamePolicies applies spec, comma-separated old=new pairs, to the
// policy of every run; an empty spec renames nothing.
func renamePolicies(results []*driver.Result, spec string) error {
	if spec == "" {
		return nil
	}
	names := map[string]string{}
	for _, pair := range strings.Split(spec, ",") {
		old, name, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("-rename %q: want old=new", pair)
		}
		names[old] = name
	}
	for _, res := range results {
		for _, r := range res.Runs {
			if name, ok := names[r.Policy]; ok {
				r.Policy = name
			}
		}
	}
	return nil
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

// summary is one cell's figures over the repeats, computed once and read
// by both the table and the chart.
type summary struct {
	workload string
	load     string
	repeats  int   // the most runs of any policy
	bound    *stat // upper bound hit rate; nil without one
	rows     []row // in display order
}

// row is one policy's figures over the repeats.
type row struct {
	policy      string
	runs        int
	hit         stat
	p50, p90    stat // TTFT, seconds
	engineP90   stat // the engines' own TTFT p90; 0 in results without it
	errors      int
	imbalance   stat
	preemptions stat
	lag         stat // timer lag p99, ms: how starved the machine was

	// The figures of each run, in order, for the paired verdicts.
	hits, p50s, p90s, p99s []float64
}

func summaries(cells []*cell) []*summary {
	sums := make([]*summary, len(cells))
	for i, c := range cells {
		s := &summary{workload: c.workload, load: c.load}
		if len(c.bounds) > 0 {
			b := summarize(c.bounds)
			s.bound = &b
		}
		for _, p := range c.policies {
			runs := c.runs[p]
			s.repeats = max(s.repeats, len(runs))
			r := row{
				policy:      p,
				runs:        len(runs),
				hit:         over(runs, func(r *driver.Run) float64 { return r.HitRate }),
				p50:         over(runs, func(r *driver.Run) float64 { return r.TTFT.P50 }),
				p90:         over(runs, func(r *driver.Run) float64 { return r.TTFT.P90 }),
				engineP90:   over(runs, func(r *driver.Run) float64 { return r.EngineTTFT.P90 }),
				imbalance:   over(runs, imbalance),
				preemptions: over(runs, preemptions),
				lag:         over(runs, func(r *driver.Run) float64 { return r.TimerLag.P99 }),
			}
			for _, run := range runs {
				r.errors += run.Errors
				r.hits = append(r.hits, run.HitRate)
				r.p50s = append(r.p50s, run.TTFT.P50)
				r.p90s = append(r.p90s, run.TTFT.P90)
				r.p99s = append(r.p99s, run.TTFT.P99)
			}
			s.rows = append(s.rows, r)
		}
		sums[i] = s
	}
	return sums
}

// title names the cell, its repeats and its upper bound, as the table's
// heading and the chart's row title.
func (s *summary) title() string {
	runs := fmt.Sprintf("%d repeats", s.repeats)
	if s.repeats == 1 {
		runs = "1 run"
	}
	if s.bound != nil {
		runs += "; upper bound " + s.bound.format(3)
	}
	return fmt.Sprintf("%s, %s (%s)", s.workload, s.load, runs)
}

// verdictRule says which policy the others are paired with and how
// many runs a verdict needs.
type verdictRule struct {
	lead      string
	reference string // marked in the tables, if set
	minRuns   int    // raises MinPairs
}

// need is the fewest paired runs a verdict needs.
func (v verdictRule) need() int {
	return max(MinPairs, v.minRuns)
}

func write(w io.Writer, sums []*summary, v verdictRule) error {
	for _, s := range sums {
		fmt.Fprintf(w, "### %s\n\n", s.title())
		// The engines' own TTFT, where every run of the cell measured it.
		engine := true
		for _, r := range s.rows {
			engine = engine && r.engineP90.lo > 0
		}
		head, rule := "", ""
		if engine {
			head, rule = " engine TTFT p90 (s) |", "---:|"
		}
		fmt.Fprintf(w, "| policy | runs | hit rate | TTFT p50 (s) | TTFT p90 (s) |%s errors | requests max/mean | preemptions | timer lag p99 (ms) |\n", head)
		fmt.Fprintf(w, "|---|---:|---:|---:|---:|%s---:|---:|---:|---:|\n", rule)
		for _, r := range s.rows {
			cell := ""
			if engine {
				cell = " " + r.engineP90.format(2) + " |"
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s |%s %d | %s | %s | %s |\n", r.policy, r.runs,
				r.hit.format(3), r.p50.format(2), r.p90.format(2), cell, r.errors,
				r.imbalance.format(2), r.preemptions.format(0), r.lag.format(1))
		}
		if cs := comparisons(s, v); len(cs) > 0 {
			fmt.Fprintf(w, "\nPaired with %s, run by run: the mean difference %s − policy [95%% paired bootstrap interval, %d resamples] and the differences above/below zero; a verdict needs the interval to exclude zero and %d runs of each.\n\n", v.lead, v.lead, Resamples, v.need())
			fmt.Fprintln(w, "| policy | hit rate Δ | hit rate | TTFT p50 Δ (s) | TTFT p90 Δ (s) | TTFT p90 | TTFT p99 Δ (s) |")
			fmt.Fprintln(w, "|---|---:|---|---:|---:|---|---:|")
			for _, c := range cs {
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", v.name(c.policy), c.hit.format(3), c.word(c.hitVerdict),
					c.p50.format(4), c.p90.format(4), c.word(c.p90Verdict), c.p99.format(4))
			}
		}
		fmt.Fprintln(w)
	}
	return writeVerdicts(w, sums, v)
}

// name marks the reference policy.
func (v verdictRule) name(policy string) string {
	if policy == v.reference {
		return policy + " (reference)"
	}
	return policy
}

// comparisons pairs the lead with every other policy of the cell, in
// display order; none without the lead.
func comparisons(s *summary, v verdictRule) []comparison {
	i := slices.IndexFunc(s.rows, func(r row) bool { return r.policy == v.lead })
	if i < 0 {
		return nil
	}
	var cs []comparison
	for _, r := range s.rows {
		if r.policy != v.lead {
			cs = append(cs, compareRows(s.rows[i], r, v.need()))
		}
	}
	return cs
}

// writeVerdicts ends the output with every cell's verdicts: the policies
// the lead leads, ties and trails on hit rate and on TTFT p90.
func writeVerdicts(w io.Writer, sums []*summary, v verdictRule) error {
	header := false
	for _, s := range sums {
		cs := comparisons(s, v)
		if len(cs) == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "### Verdicts of %s\n\n", v.lead)
			fmt.Fprintln(w, "| cell | hit rate: leads | ties | behind | TTFT p90: leads | ties | behind | no verdict |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
			header = true
		}
		var hit, p90 [behind + 1][]string
		var none []string
		for _, c := range cs {
			if c.hitVerdict < tie {
				none = append(none, v.name(c.policy)+": "+c.word(c.hitVerdict))
				continue
			}
			hit[c.hitVerdict] = append(hit[c.hitVerdict], v.name(c.policy))
			p90[c.p90Verdict] = append(p90[c.p90Verdict], v.name(c.policy))
		}
		j := func(ps []string) string { return strings.Join(ps, ", ") }
		fmt.Fprintf(w, "| %s, %s | %s | %s | %s | %s | %s | %s | %s |\n", s.workload, s.load,
			j(hit[leads]), j(hit[tie]), j(hit[behind]), j(p90[leads]), j(p90[tie]), j(p90[behind]), j(none))
	}
	if header {
		fmt.Fprintln(w)
	}
	return nil
}
