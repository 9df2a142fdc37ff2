// Command membench measures the memory a real Caddy process holds for
// request bodies with lb_policy prefix_cache beside round_robin (or
// least_conn), in the same run: Caddy's resident set at rest and at its
// peak, and the policy's own body bytes (caddy_prefix_cache_body_bytes_in_use
// and _allocated, sampled every 50 ms), while many clients send long
// prompts to engines that read them and then stream their answers for
// seconds, either all at once (-arrivals burst: every upload overlaps) or
// as a running service sees them (-arrivals steady: n clients staggered
// over one answer's time, each sending again when its answer ends); and
// the same under attacks that try
// to pin memory (stalled and trickling uploads over HTTP/1.1 and h2c,
// clients that never read their answers), with the latency an ordinary
// client sees meanwhile.
//
// Each (policy, prompt size, concurrency) runs on a fresh Caddy, the
// binary `go build ./cmd/caddy` gives, run as `caddy run`, so the memory
// limit is the one Caddy's main sets (90% of the machine's memory here).
// The load runs through the shipped configuration, Caddyfile.example
// (adapted by that binary; round_robin and least_conn replace its
// lb_policy block), with an API key on every request for its tenant
// option; the attacks run through a bare site of membench's own that
// serves h2c, which Caddyfile.example's site does not.
//
//	bench/memory/run.sh                      # builds Caddy, runs everything
//	bench/memory/run.sh -sizes 2MiB -conc 200 -policies round_robin,prefix_cache
//	bench/memory/run.sh -only load -arrivals steady
//	bench/memory/sweep.sh                    # body_budget against peak RSS and fallbacks
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/prefixcache/caddy-prefixcache/bench/child"
)

type options struct {
	caddy     string
	sizes     string
	conc      string
	policies  string
	stream    time.Duration
	hostileN  int
	hold      time.Duration
	only      string
	jsonOut   string
	budgets   []string // body_budget values; "" is the policy's default
	arrivals  []string
	runs      int
	caddyfile string // the load's config; "" for membench's bare site
	profile   string // directory for heap profiles, if any
	render    string
}

// cell is one measurement.
type cell struct {
	Scenario string `json:"scenario"`
	// Arrivals is how the load's requests start: "burst" (all at once)
	// or "steady" (staggered, each client sending again when its answer
	// ends).
	Arrivals string `json:"arrivals,omitempty"`
	Policy   string `json:"policy"`
	// Config is the configuration the cell ran: a Caddyfile's name, or
	// "membench" for the bare site.
	Config string `json:"config,omitempty"`
	// Run numbers the repetitions of a cell (from 1).
	Run     int   `json:"run,omitempty"`
	Size    int   `json:"prompt_bytes,omitempty"`
	Conc    int   `json:"concurrency"`
	RestRSS int64 `json:"rest_rss"`
	PeakRSS int64 `json:"peak_rss"`
	// PeakInUse and PeakAllocated are the largest
	// caddy_prefix_cache_body_bytes_in_use and _allocated sampled (every
	// 50 ms), PeakHeap Go's heap in use.
	PeakInUse     float64 `json:"peak_body_in_use"`
	PeakAllocated float64 `json:"peak_body_allocated"`
	PeakHeap      float64 `json:"peak_heap_inuse"`
	Budget        float64 `json:"body_budget"`
	// BudgetSet is the body_budget configured, "" for the default.
	BudgetSet string `json:"body_budget_set,omitempty"`
	// StreamingRSS and StreamingInUse are Caddy's resident set and the
	// policy's bytes in use one second after every upload ended, while
	// every answer still streams: what early release keeps.
	StreamingRSS   int64   `json:"streaming_rss,omitempty"`
	StreamingInUse float64 `json:"streaming_body_in_use,omitempty"`
	// AllocatedPerRequest is Go's allocation (go_memstats_alloc_bytes_total)
	// during the run, per request: what feeds the garbage collector.
	AllocatedPerRequest float64 `json:"go_alloc_bytes_per_request"`
	// Requests is how many requests the load sent.
	Requests int `json:"requests,omitempty"`
	// BudgetSkips is how many of them the budget sent to the fallback.
	BudgetSkips float64 `json:"budget_skips"`
	// Outcomes counts the load's selections by
	// caddy_prefix_cache_body_peeks_total's outcome: "routed", or why
	// the request went to the fallback (zeros left out). A retry after
	// a dial error is a selection of its own.
	Outcomes map[string]float64 `json:"peek_outcomes,omitempty"`
	Errors   int                `json:"errors"`
	// ErrorKinds counts the errors by their first text.
	ErrorKinds map[string]int `json:"error_kinds,omitempty"`
	Seconds    float64        `json:"seconds"`
	// Probe latencies (to the first event) before and during an attack.
	ProbeBeforeP50 float64 `json:"probe_before_p50_ms,omitempty"`
	ProbeBeforeP99 float64 `json:"probe_before_p99_ms,omitempty"`
	ProbeDuringP50 float64 `json:"probe_during_p50_ms,omitempty"`
	ProbeDuringP99 float64 `json:"probe_during_p99_ms,omitempty"`
	ProbeErrors    int     `json:"probe_errors,omitempty"`
	// EndRSS and EndInUse are Caddy's resident set and the policy's bytes
	// in use at the end of an attack, before it stops: what it pins.
	EndRSS   int64   `json:"end_rss,omitempty"`
	EndInUse float64 `json:"end_body_in_use,omitempty"`
}

func main() {
	var o options
	flag.StringVar(&o.caddy, "caddy", "", "Caddy binary with the prefix_cache module (go build -o /tmp/caddy ./cmd/caddy)")
	flag.StringVar(&o.sizes, "sizes", "32KB,512KB,2MiB", "prompt sizes")
	flag.StringVar(&o.conc, "conc", "1,100,200,1000,3000", "concurrent streaming requests")
	flag.StringVar(&o.policies, "policies", "round_robin,prefix_cache", "policies compared (least_conn is a stock baseline too)")
	flag.DurationVar(&o.stream, "stream", 10*time.Second, "how long each answer streams")
	flag.IntVar(&o.hostileN, "hostile-conns", 200, "connections (or streams) per attack")
	flag.DurationVar(&o.hold, "hold", 5*time.Second, "how long an attack holds")
	flag.StringVar(&o.only, "only", "", "run only 'load' or 'hostile'")
	flag.StringVar(&o.jsonOut, "json", "", "write the raw results here")
	budgets := flag.String("body-budget", "default", "prefix_cache's body_budget, comma-separated to sweep it ('default': the policy's default)")
	arrivals := flag.String("arrivals", "burst", "how load requests start, comma-separated: burst (all at once, every upload overlapping) or steady (staggered over -stream, each client sending again when its answer ends, for 3 x -stream)")
	flag.IntVar(&o.runs, "runs", 1, "repetitions of every load cell, interleaved")
	flag.StringVar(&o.caddyfile, "caddyfile", "Caddyfile.example", "the Caddyfile the load runs through (its lb_policy prefix_cache block; other policies replace it); 'none' for membench's bare site")
	flag.StringVar(&o.profile, "heap-profile", "", "write to this directory, per load cell, Caddy's heap profile taken when its heap in use was largest (fetching profiles allocates in Caddy: leave it off for figures)")
	flag.StringVar(&o.render, "render", "", "print the tables of this -json file and exit")
	flag.Parse()
	if o.render != "" {
		if err := render(o.render); err != nil {
			log.Fatal(err)
		}
		return
	}
	for a := range strings.SplitSeq(*arrivals, ",") {
		if a != "burst" && a != "steady" {
			log.Fatalf("-arrivals %q: want burst or steady", a)
		}
		o.arrivals = append(o.arrivals, a)
	}
	for b := range strings.SplitSeq(*budgets, ",") {
		if b == "default" {
			b = ""
		} else if _, err := humanize.ParseBytes(b); err != nil {
			log.Fatalf("-body-budget %q: %v", b, err)
		}
		o.budgets = append(o.budgets, b)
	}
	if o.runs < 1 {
		log.Fatalf("-runs must be positive, got %d", o.runs)
	}
	if o.caddyfile == "none" {
		o.caddyfile = ""
	}
	if o.caddy == "" {
		log.Fatal("-caddy is required (bench/memory/run.sh builds it)")
	}
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "membench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	eng, err := startEngines(4, o.stream)
	if err != nil {
		return err
	}
	defer eng.close()

	var cells []cell
	policies := strings.Split(o.policies, ",")
	if o.only != "hostile" {
		// Runs interleave: every cell once, then every cell again, so
		// that a drift of the machine spreads over all of them.
		for run := 1; run <= o.runs; run++ {
			for _, arr := range o.arrivals {
				for _, sz := range strings.Split(o.sizes, ",") {
					size, err := humanize.ParseBytes(sz)
					if err != nil {
						return fmt.Errorf("size %q: %w", sz, err)
					}
					bodies := prompts(int(size), 16)
					for _, cs := range strings.Split(o.conc, ",") {
						var n int
						fmt.Sscan(cs, &n)
						for _, pol := range policies {
							budgets := o.budgets
							if pol != "prefix_cache" {
								budgets = []string{""} // no body budget to sweep
							}
							for _, budget := range budgets {
								lc := loadCell{policy: pol, arrivals: arr, budget: budget, run: run, bodies: bodies, size: int(size), n: n}
								c, err := measureLoad(o, dir, eng, lc)
								if err != nil {
									return err
								}
								cells = append(cells, c)
								fmt.Fprintf(os.Stderr, "load %s run %d %-12s %-7s %7s x %4d: rest %s, peak %s (heap %s), bodies in use %s, allocated %s, budget %s, outcomes %v, errors %d; streaming: RSS %s, in use %s (%.1fs)\n",
									arr, run, pol, orDefault(budget), sz, n, mib(c.RestRSS), mib(c.PeakRSS), mib(int64(c.PeakHeap)), mib(int64(c.PeakInUse)), mib(int64(c.PeakAllocated)), mib(int64(c.Budget)), c.Outcomes, c.Errors, mib(c.StreamingRSS), mib(int64(c.StreamingInUse)), c.Seconds)
								for kind, k := range c.ErrorKinds {
									fmt.Fprintf(os.Stderr, "\t%d x %s\n", k, kind)
								}
							}
						}
					}
				}
			}
		}
	}
	if o.only != "load" {
		for _, a := range attacks {
			for _, pol := range []string{"least_conn", "prefix_cache"} {
				c, err := measureAttack(o, dir, eng, pol, a)
				if err != nil {
					return err
				}
				cells = append(cells, c)
				fmt.Fprintf(os.Stderr, "attack %-12s %s: rest %s, peak %s, bodies in use %s, allocated %s, probe p50/p99 %.1f/%.1f ms before, %.1f/%.1f ms during\n",
					pol, a.name, mib(c.RestRSS), mib(c.PeakRSS), mib(int64(c.PeakInUse)), mib(int64(c.PeakAllocated)), c.ProbeBeforeP50, c.ProbeBeforeP99, c.ProbeDuringP50, c.ProbeDuringP99)
			}
		}
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"stream_seconds": o.stream.Seconds(), "cells": cells}, "", "  ")
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	printTables(cells)
	return nil
}

// render prints the tables of a -json file.
func render(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f struct {
		Cells []cell `json:"cells"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for i := range f.Cells {
		if f.Cells[i].Scenario == "load" && f.Cells[i].Arrivals == "" {
			f.Cells[i].Arrivals = "burst" // files written before -arrivals
		}
	}
	printTables(f.Cells)
	return nil
}

// policyJSON is the selection policy object of a policy name, with
// body_budget set for prefix_cache unless budget is "".
func policyJSON(name, budget string) map[string]any {
	p := map[string]any{"policy": name}
	if name == "prefix_cache" && budget != "" {
		b, _ := humanize.ParseBytes(budget)
		p["body_budget"] = b
	}
	return p
}

// launch starts a Caddy with policy: through o.caddyfile when shipped is
// set and o has one, else through membench's bare site.
func launch(o options, dir string, eng *engines, policy, budget string, shipped bool) (*caddyProc, error) {
	ports, err := child.ReservePorts(2)
	if err != nil {
		return nil, err
	}
	site, admin := ports[0], ports[1]
	cfg := siteConfig(site, admin, eng.addrs, policyJSON(policy, budget))
	if shipped && o.caddyfile != "" {
		if cfg, err = shippedConfig(o.caddy, dir, o.caddyfile, site, admin, eng.addrs, policyJSON(policy, budget)); err != nil {
			return nil, err
		}
	}
	return startCaddy(o.caddy, dir, cfg, site, admin)
}

// configName names the configuration a load cell runs.
func configName(o options) string {
	if o.caddyfile == "" {
		return "membench"
	}
	return filepath.Base(o.caddyfile)
}

func orDefault(budget string) string {
	if budget == "" {
		return "default"
	}
	return budget
}

// warm sends a few small requests so that the resident set at rest
// includes what any first request allocates.
func warm(c *caddyProc) {
	probe(client(), c.site+"/v1/chat/completions", 4)
}

// loadCell is one load measurement to make.
type loadCell struct {
	policy, arrivals, budget string
	run                      int
	bodies                   [][]byte
	size, n                  int
}

func measureLoad(o options, dir string, eng *engines, lc loadCell) (cell, error) {
	eng.flood.Store(0)
	c, err := launch(o, dir, eng, lc.policy, lc.budget, true)
	if err != nil {
		return cell{}, err
	}
	defer c.stop()
	warm(c)
	rest, _ := c.rss()
	before := c.metric("")
	allocBefore := before["go_memstats_alloc_bytes_total"]
	s := sample(c, 50*time.Millisecond, o.profile != "")
	start := time.Now()
	// headers is closed when the answers stream: in a burst, once every
	// request has its response headers; in steady arrivals, once every
	// client has started (after one stream's time).
	headers := make(chan struct{})
	var streamingRSS int64
	var streamingInUse float64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		select {
		case <-headers:
		case <-time.After(2 * o.stream):
			return // some request never got its headers: no streaming phase
		}
		time.Sleep(time.Second) // into the streaming phase: the scenario, not synchronisation
		streamingRSS, _ = c.rss()
		streamingInUse = c.metric("caddy_prefix_cache_body_bytes_in_use")["caddy_prefix_cache_body_bytes_in_use"]
	}()
	url := c.site + "/v1/chat/completions"
	var errs errTally
	requests := lc.n
	if lc.arrivals == "steady" {
		t := time.AfterFunc(o.stream, func() { close(headers) })
		defer t.Stop()
		requests = steady(context.Background(), client(), url, lc.n, o.stream, 3*o.stream, lc.bodies, &errs)
	} else {
		burst(context.Background(), client(), url, lc.n, lc.bodies, headers, &errs)
	}
	<-sampled
	pk := s.stop()
	_, hwm := c.rss()
	m := c.metric("")
	if o.profile != "" && len(pk.Profile) > 0 {
		name := fmt.Sprintf("%s-%s-%s-%d-%d-run%d.heap.pb.gz", lc.arrivals, lc.policy, orDefault(lc.budget), lc.size, lc.n, lc.run)
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return cell{}, err
		}
		if err := os.WriteFile(filepath.Join(o.profile, name), pk.Profile, 0o644); err != nil {
			return cell{}, err
		}
	}
	return cell{
		AllocatedPerRequest: (m["go_memstats_alloc_bytes_total"] - allocBefore) / float64(requests),
		Arrivals:            lc.arrivals,
		StreamingRSS:        streamingRSS, StreamingInUse: streamingInUse,
		Scenario: "load", Policy: lc.policy, Config: configName(o), Run: lc.run, Size: lc.size, Conc: lc.n,
		RestRSS: rest, PeakRSS: max(pk.RSS, hwm), PeakInUse: pk.InUse, PeakAllocated: pk.Allocated, PeakHeap: pk.Heap,
		Budget:      m["caddy_prefix_cache_body_budget_bytes"],
		BudgetSet:   lc.budget,
		BudgetSkips: m[`caddy_prefix_cache_body_peeks_total{outcome="budget"}`] - before[`caddy_prefix_cache_body_peeks_total{outcome="budget"}`],
		Outcomes:    outcomes(before, m),
		Requests:    requests,
		Errors:      errs.n, ErrorKinds: errs.kinds, Seconds: time.Since(start).Seconds(),
	}, nil
}

// outcomes returns how much caddy_prefix_cache_body_peeks_total grew
// from before to after, by outcome, the zeros left out.
func outcomes(before, after map[string]float64) map[string]float64 {
	const prefix = `caddy_prefix_cache_body_peeks_total{outcome="`
	out := map[string]float64{}
	for k, v := range after {
		if o, ok := strings.CutPrefix(k, prefix); ok && v > before[k] {
			out[strings.TrimSuffix(o, `"}`)] = v - before[k]
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func measureAttack(o options, dir string, eng *engines, policy string, a attack) (cell, error) {
	eng.flood.Store(a.flood)
	defer eng.flood.Store(0)
	c, err := launch(o, dir, eng, policy, o.budgets[0], false)
	if err != nil {
		return cell{}, err
	}
	defer c.stop()
	warm(c)
	rest, _ := c.rss()
	url := c.site + "/v1/chat/completions"
	pc := client()
	b50, b99, _ := probe(pc, url, 20)
	s := sample(c, 50*time.Millisecond, false)
	start := time.Now()
	stop, err := a.start(strings.TrimPrefix(c.site, "http://"), o.hostileN)
	if err != nil {
		s.stop()
		return cell{}, fmt.Errorf("%s: %w", a.name, err)
	}
	// Let the attack settle, then see what an ordinary client gets.
	time.Sleep(o.hold / 2) // the attack's duration is the scenario, not synchronisation
	d50, d99, perr := probe(pc, url, 20)
	time.Sleep(o.hold / 2)
	endRSS, _ := c.rss()
	endInUse := c.metric("caddy_prefix_cache_body_bytes_in_use")["caddy_prefix_cache_body_bytes_in_use"]
	stop()
	pk := s.stop()
	_, hwm := c.rss()
	m := c.metric("caddy_prefix_cache_")
	return cell{
		Scenario: a.name, Policy: policy, Config: "membench", Conc: o.hostileN,
		RestRSS: rest, PeakRSS: max(pk.RSS, hwm), PeakInUse: pk.InUse, PeakAllocated: pk.Allocated, PeakHeap: pk.Heap,
		Budget:         m["caddy_prefix_cache_body_budget_bytes"],
		BudgetSkips:    m[`caddy_prefix_cache_body_peeks_total{outcome="budget"}`],
		Seconds:        time.Since(start).Seconds(),
		ProbeBeforeP50: ms(b50), ProbeBeforeP99: ms(b99),
		ProbeDuringP50: ms(d50), ProbeDuringP99: ms(d99), ProbeErrors: perr,
		EndRSS: endRSS, EndInUse: endInUse,
	}, nil
}

// loadKey pairs a load cell with the baseline run beside it.
type loadKey struct {
	size, conc int
	arrivals   string
	run        int
}

func keyOf(c cell) loadKey { return loadKey{c.Size, c.Conc, c.Arrivals, c.Run} }

func printTables(cells []cell) {
	fmt.Println("| prompt | arrivals | concurrent | round_robin peak RSS | prefix_cache peak RSS | extra | prefix_cache / round_robin | bodies in use, peak | allocated, peak | budget | budget skips | while streaming: round_robin / prefix_cache RSS, bodies in use | errors |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
	base := map[loadKey]cell{}
	for _, c := range cells {
		if c.Scenario == "load" && c.Policy != "prefix_cache" {
			base[keyOf(c)] = c
		}
	}
	for _, c := range cells {
		if c.Scenario != "load" || c.Policy != "prefix_cache" {
			continue
		}
		b := base[keyOf(c)]
		streaming := "—"
		if b.StreamingRSS > 0 && c.StreamingRSS > 0 {
			streaming = fmt.Sprintf("%s / %s, %s", mib(b.StreamingRSS), mib(c.StreamingRSS), mib(int64(c.StreamingInUse)))
		}
		fmt.Printf("| %s | %s | %d | %s | %s | %s | %.2f | %s | %s | %s | %.0f | %s | %d / %d |\n",
			humanize.IBytes(uint64(c.Size)), c.Arrivals, c.Conc, mib(b.PeakRSS), mib(c.PeakRSS), mib(c.PeakRSS-b.PeakRSS),
			float64(c.PeakRSS)/float64(max(b.PeakRSS, 1)), mib(int64(c.PeakInUse)), mib(int64(c.PeakAllocated)), mib(int64(c.Budget)), c.BudgetSkips,
			streaming, b.Errors, c.Errors)
	}
	printSweep(cells, base)
	fmt.Println()
	fmt.Println("| attack | policy | RSS at rest | peak RSS | bodies in use, peak | allocated, peak | at the attack's end: RSS, bodies in use | probe p50 / p99 before | during |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		if c.Scenario == "load" {
			continue
		}
		end := "—"
		if c.EndRSS > 0 {
			end = fmt.Sprintf("%s, %s", mib(c.EndRSS), mib(int64(c.EndInUse)))
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %.1f / %.1f ms | %.1f / %.1f ms |\n",
			c.Scenario, c.Policy, mib(c.RestRSS), mib(c.PeakRSS), mib(int64(c.PeakInUse)), mib(int64(c.PeakAllocated)), end,
			c.ProbeBeforeP50, c.ProbeBeforeP99, c.ProbeDuringP50, c.ProbeDuringP99)
	}
}

// printSweep prints, for cells with runs (a -runs or -body-budget
// sweep), one row per prompt size, concurrency, arrivals and body_budget:
// each run's peak resident set of round_robin and of prefix_cache, their
// ratio, the requests sent, and those prefix_cache sent to the fallback
// (by the budget, and for any reason) or routed.
func printSweep(cells []cell, base map[loadKey]cell) {
	type row struct {
		size, conc       int
		arrivals, budget string
		cells            []cell
	}
	var rows []*row
	for _, c := range cells {
		if c.Scenario != "load" || c.Policy != "prefix_cache" || c.Run == 0 {
			continue
		}
		i := slices.IndexFunc(rows, func(r *row) bool {
			return r.size == c.Size && r.conc == c.Conc && r.arrivals == c.Arrivals && r.budget == c.BudgetSet
		})
		if i < 0 {
			rows = append(rows, &row{size: c.Size, conc: c.Conc, arrivals: c.Arrivals, budget: c.BudgetSet})
			i = len(rows) - 1
		}
		rows[i].cells = append(rows[i].cells, c)
	}
	if len(rows) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("| prompt | arrivals | concurrent | body_budget | runs | round_robin peak RSS | prefix_cache peak RSS | prefix_cache / round_robin | worst | requests | to the fallback by the budget | to the fallback, any reason | routed | errors |")
	fmt.Println("|---|---|---:|---|---:|---|---|---|---:|---|---|---|---|---:|")
	for _, r := range rows {
		var rr, pc, ratio, requests, budget, fallback, routed []string
		worst, errs := 0.0, 0
		for _, c := range r.cells {
			b := base[keyOf(c)]
			x := float64(c.PeakRSS) / float64(max(b.PeakRSS, 1))
			worst = max(worst, x)
			rr = append(rr, fmt.Sprintf("%.0f", float64(b.PeakRSS)/(1<<20)))
			pc = append(pc, fmt.Sprintf("%.0f", float64(c.PeakRSS)/(1<<20)))
			ratio = append(ratio, fmt.Sprintf("%.2f", x))
			requests = append(requests, fmt.Sprint(c.Requests))
			budget = append(budget, fmt.Sprintf("%.0f", c.BudgetSkips))
			fb := 0.0
			for o, n := range c.Outcomes {
				if o != "routed" {
					fb += n
				}
			}
			fallback = append(fallback, fmt.Sprintf("%.0f", fb))
			routed = append(routed, fmt.Sprintf("%.0f", c.Outcomes["routed"]))
			errs += b.Errors + c.Errors
		}
		label := orDefault(r.budget)
		if b := r.cells[0].Budget; r.budget == "" && b > 0 {
			label = fmt.Sprintf("default (%s)", mib(int64(b)))
		}
		fmt.Printf("| %s | %s | %d | %s | %d | %s MiB | %s MiB | %s | %.2f | %s | %s | %s | %s | %d |\n",
			humanize.IBytes(uint64(r.size)), r.arrivals, r.conc, label, len(r.cells),
			strings.Join(rr, ", "), strings.Join(pc, ", "), strings.Join(ratio, ", "), worst,
			strings.Join(requests, ", "), strings.Join(budget, ", "), strings.Join(fallback, ", "), strings.Join(routed, ", "), errs)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
