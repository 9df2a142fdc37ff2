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
//
//	bench/memory/run.sh                      # builds Caddy, runs everything
//	bench/memory/run.sh -sizes 2MiB -conc 200 -policies round_robin,prefix_cache
//	bench/memory/run.sh -only load -arrivals steady
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/prefixcache/caddy-prefixcache/bench/child"
)

type options struct {
	caddy    string
	sizes    string
	conc     string
	policies string
	stream   time.Duration
	hostileN int
	hold     time.Duration
	only     string
	jsonOut  string
	budget   string
	arrivals string
	render   string
}

// cell is one measurement.
type cell struct {
	Scenario string `json:"scenario"`
	// Arrivals is how the load's requests start: "burst" (all at once)
	// or "steady" (staggered, each client sending again when its answer
	// ends).
	Arrivals string `json:"arrivals,omitempty"`
	Policy   string `json:"policy"`
	Size     int    `json:"prompt_bytes,omitempty"`
	Conc     int    `json:"concurrency"`
	RestRSS  int64  `json:"rest_rss"`
	PeakRSS  int64  `json:"peak_rss"`
	// PeakInUse and PeakAllocated are the largest
	// caddy_prefix_cache_body_bytes_in_use and _allocated sampled (every
	// 50 ms), PeakHeap Go's heap in use.
	PeakInUse     float64 `json:"peak_body_in_use"`
	PeakAllocated float64 `json:"peak_body_allocated"`
	PeakHeap      float64 `json:"peak_heap_inuse"`
	Budget        float64 `json:"body_budget"`
	// StreamingRSS and StreamingInUse are Caddy's resident set and the
	// policy's bytes in use one second after every upload ended, while
	// every answer still streams: what early release keeps.
	StreamingRSS   int64   `json:"streaming_rss,omitempty"`
	StreamingInUse float64 `json:"streaming_body_in_use,omitempty"`
	// AllocatedPerRequest is Go's allocation (go_memstats_alloc_bytes_total)
	// during the run, per request: what feeds the garbage collector.
	AllocatedPerRequest float64 `json:"go_alloc_bytes_per_request"`
	// BudgetSkips is how many requests the budget sent to the fallback.
	BudgetSkips float64 `json:"budget_skips"`
	Errors      int     `json:"errors"`
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
	flag.StringVar(&o.budget, "body-budget", "", "prefix_cache's body_budget (default: the policy's default)")
	flag.StringVar(&o.arrivals, "arrivals", "burst", "how load requests start: burst (all at once, every upload overlapping) or steady (staggered over -stream, each client sending again when its answer ends, for 3 x -stream)")
	flag.StringVar(&o.render, "render", "", "print the tables of this -json file and exit")
	flag.Parse()
	if o.render != "" {
		if err := render(o.render); err != nil {
			log.Fatal(err)
		}
		return
	}
	if o.arrivals != "burst" && o.arrivals != "steady" {
		log.Fatalf("-arrivals %q: want burst or steady", o.arrivals)
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
					c, err := measureLoad(o, dir, eng, pol, bodies, int(size), n)
					if err != nil {
						return err
					}
					cells = append(cells, c)
					fmt.Fprintf(os.Stderr, "load %-12s %7s x %4d: rest %s, peak %s (heap %s), bodies in use %s, allocated %s, budget skips %.0f, errors %d; streaming: RSS %s, in use %s (%.1fs)\n",
						pol, sz, n, mib(c.RestRSS), mib(c.PeakRSS), mib(int64(c.PeakHeap)), mib(int64(c.PeakInUse)), mib(int64(c.PeakAllocated)), c.BudgetSkips, c.Errors, mib(c.StreamingRSS), mib(int64(c.StreamingInUse)), c.Seconds)
					for kind, k := range c.ErrorKinds {
						fmt.Fprintf(os.Stderr, "\t%d x %s\n", k, kind)
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

// policyJSON is the selection policy object of a policy name.
func policyJSON(o options, name string) map[string]any {
	p := map[string]any{"policy": name}
	if name == "prefix_cache" && o.budget != "" {
		b, _ := humanize.ParseBytes(o.budget)
		p["body_budget"] = b
	}
	return p
}

func launch(o options, dir string, eng *engines, policy string) (*caddyProc, error) {
	ports, err := child.ReservePorts(2)
	if err != nil {
		return nil, err
	}
	site, admin := ports[0], ports[1]
	return startCaddy(o.caddy, dir, siteConfig(site, admin, eng.addrs, policyJSON(o, policy)), site, admin)
}

// warm sends a few small requests so that the resident set at rest
// includes what any first request allocates.
func warm(c *caddyProc) {
	probe(client(), c.site+"/v1/chat/completions", 4)
}

func measureLoad(o options, dir string, eng *engines, policy string, bodies [][]byte, size, n int) (cell, error) {
	eng.flood.Store(0)
	c, err := launch(o, dir, eng, policy)
	if err != nil {
		return cell{}, err
	}
	defer c.stop()
	warm(c)
	rest, _ := c.rss()
	allocBefore := c.metric("go_memstats_alloc_bytes_total")["go_memstats_alloc_bytes_total"]
	s := sample(c, 50*time.Millisecond)
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
	requests := n
	if o.arrivals == "steady" {
		t := time.AfterFunc(o.stream, func() { close(headers) })
		defer t.Stop()
		requests = steady(context.Background(), client(), url, n, o.stream, 3*o.stream, bodies, &errs)
	} else {
		burst(context.Background(), client(), url, n, bodies, headers, &errs)
	}
	<-sampled
	pk := s.stop()
	_, hwm := c.rss()
	m := c.metric("")
	return cell{
		AllocatedPerRequest: (m["go_memstats_alloc_bytes_total"] - allocBefore) / float64(requests),
		Arrivals:            o.arrivals,
		StreamingRSS:        streamingRSS, StreamingInUse: streamingInUse,
		Scenario: "load", Policy: policy, Size: size, Conc: n,
		RestRSS: rest, PeakRSS: max(pk.RSS, hwm), PeakInUse: pk.InUse, PeakAllocated: pk.Allocated, PeakHeap: pk.Heap,
		Budget:      m["caddy_prefix_cache_body_budget_bytes"],
		BudgetSkips: m[`caddy_prefix_cache_body_peeks_total{outcome="budget"}`],
		Errors:      errs.n, ErrorKinds: errs.kinds, Seconds: time.Since(start).Seconds(),
	}, nil
}

func measureAttack(o options, dir string, eng *engines, policy string, a attack) (cell, error) {
	eng.flood.Store(a.flood)
	defer eng.flood.Store(0)
	c, err := launch(o, dir, eng, policy)
	if err != nil {
		return cell{}, err
	}
	defer c.stop()
	warm(c)
	rest, _ := c.rss()
	url := c.site + "/v1/chat/completions"
	pc := client()
	b50, b99, _ := probe(pc, url, 20)
	s := sample(c, 50*time.Millisecond)
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
		Scenario: a.name, Policy: policy, Conc: o.hostileN,
		RestRSS: rest, PeakRSS: max(pk.RSS, hwm), PeakInUse: pk.InUse, PeakAllocated: pk.Allocated, PeakHeap: pk.Heap,
		Budget:         m["caddy_prefix_cache_body_budget_bytes"],
		BudgetSkips:    m[`caddy_prefix_cache_body_peeks_total{outcome="budget"}`],
		Seconds:        time.Since(start).Seconds(),
		ProbeBeforeP50: ms(b50), ProbeBeforeP99: ms(b99),
		ProbeDuringP50: ms(d50), ProbeDuringP99: ms(d99), ProbeErrors: perr,
		EndRSS: endRSS, EndInUse: endInUse,
	}, nil
}

func printTables(cells []cell) {
	fmt.Println("| prompt | arrivals | concurrent | round_robin peak RSS | prefix_cache peak RSS | extra | prefix_cache / round_robin | bodies in use, peak | allocated, peak | budget | budget skips | while streaming: round_robin / prefix_cache RSS, bodies in use | errors |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
	base := map[[2]int]cell{} // by size and concurrency: one arrival mode per run
	for _, c := range cells {
		if c.Scenario == "load" && c.Policy != "prefix_cache" {
			base[[2]int{c.Size, c.Conc}] = c
		}
	}
	for _, c := range cells {
		if c.Scenario != "load" || c.Policy != "prefix_cache" {
			continue
		}
		b := base[[2]int{c.Size, c.Conc}]
		streaming := "—"
		if b.StreamingRSS > 0 && c.StreamingRSS > 0 {
			streaming = fmt.Sprintf("%s / %s, %s", mib(b.StreamingRSS), mib(c.StreamingRSS), mib(int64(c.StreamingInUse)))
		}
		fmt.Printf("| %s | %s | %d | %s | %s | %s | %.2f | %s | %s | %s | %.0f | %s | %d / %d |\n",
			humanize.IBytes(uint64(c.Size)), c.Arrivals, c.Conc, mib(b.PeakRSS), mib(c.PeakRSS), mib(c.PeakRSS-b.PeakRSS),
			float64(c.PeakRSS)/float64(max(b.PeakRSS, 1)), mib(int64(c.PeakInUse)), mib(int64(c.PeakAllocated)), mib(int64(c.Budget)), c.BudgetSkips,
			streaming, b.Errors, c.Errors)
	}
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

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
