package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/child"
)

// result is one wrk run.
type result struct {
	reqs      float64 // requests/s
	p50, p99  time.Duration
	requests  int
	errors    int     // socket errors and non-2xx responses
	caddyCPU  float64 // Caddy's CPU seconds during the run
	caddyUtil float64 // caddyCPU / run length
}

// row is one body size's figures: every round of both policies in both
// modes, and the routing check's reasons.
type row struct {
	size              int
	body              int
	reasons           map[string]int
	thr, lat          [2][]result
	thrRatio, cpuRat  []float64
	p50Delta, p99Delt []time.Duration
}

// run starts the backend and the Caddy under test, measures each body
// size in both modes, A/B/B/A, and prints the report.
func run(cfg config) error {
	dir := cfg.dir
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	} else {
		d, err := os.MkdirTemp("", "overhead-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}

	var backends []string
	for i := range cfg.upstreams {
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", cfg.basePort+10+i))
	}
	backend, err := start(cfg, "0", dir, child.Spec{
		Name:       "backend",
		Path:       cfg.backend,
		Args:       []string{"-listen", strings.Join(backends, ","), "-stream", strconv.Itoa(cfg.stream)},
		StopSignal: os.Interrupt,
	})
	if err != nil {
		return err
	}
	defer backend.Stop()
	if err := child.WaitListening(backend, 15*time.Second, backends...); err != nil {
		return err
	}

	caddyfile := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(caddyfile, []byte(caddyConfig(cfg, backends)), 0o644); err != nil {
		return err
	}
	caddy, err := start(cfg, "1", dir, child.Caddy("caddy", cfg.caddy, dir, caddyfile, "caddyfile"))
	if err != nil {
		return err
	}
	defer caddy.Stop()
	var sites []string
	for p := range 3 {
		sites = append(sites, fmt.Sprintf("127.0.0.1:%d", cfg.basePort+p))
	}
	if err := child.WaitListening(caddy, 15*time.Second, sites...); err != nil {
		return fmt.Errorf("%w (log in %s)", err, filepath.Join(dir, "caddy.log"))
	}

	fmt.Printf("# %s vs %s through Caddy\n\n", policies[1], policies[0])
	if cfg.stream > 0 {
		fmt.Printf("Answers streamed as %d SSE chunks each, each flushed, then a usage chunk.\n\n", cfg.stream)
	}
	fmt.Printf("%d upstreams (one backend process), %d conversations per size cycled by wrk, %d round(s) of %v per policy and mode, interleaved A/B/B/A; throughput mode %d connections, latency mode 1; wrk -t%d.\n",
		cfg.upstreams, cfg.convs, cfg.rounds, cfg.duration, cfg.conns, cfg.threads)
	if cfg.pin {
		fmt.Printf("Pinned: Caddy on CPU 1, wrk and backend on CPU 0 (taskset).\n")
	}
	fmt.Printf("Machine: %d CPUs, load average at start %s.\n\n", numCPU(), loadavg())

	var rows []row
	for _, size := range cfg.sizes {
		script, bodyLen, err := writeBodies(dir, size, cfg.convs)
		if err != nil {
			return err
		}
		reasons, err := checkRouting(cfg, dir, size, cfg.convs)
		if err != nil {
			return err
		}
		r := row{size: size, body: bodyLen, reasons: reasons}
		for p := range policies {
			if _, err := wrk(cfg, caddy, cfg.basePort+p, script, cfg.conns, cfg.warmup); err != nil {
				return err
			}
		}
		if cfg.pprof != "" {
			if err := profile(cfg, caddy, size, script); err != nil {
				return err
			}
		}
		for _, mode := range []string{"throughput", "latency"} {
			conns := cfg.conns
			if mode == "latency" {
				conns = 1
			}
			for round := range cfg.rounds {
				order := []int{0, 1}
				if round%2 == 1 {
					order = []int{1, 0}
				}
				var got [2]result
				for _, p := range order {
					res, err := wrk(cfg, caddy, cfg.basePort+p, script, conns, cfg.duration)
					if err != nil {
						return err
					}
					got[p] = res
					log.Printf("%s %s %s round %d: %.0f req/s, p50 %v, p99 %v, Caddy %.0f%% CPU, %.1f µs CPU/req, %d errors",
						sizeName(size), mode, policies[p], round+1, res.reqs, res.p50, res.p99, 100*res.caddyUtil, 1e6*res.caddyCPU/float64(max(res.requests, 1)), res.errors)
				}
				if mode == "throughput" {
					r.thr[0], r.thr[1] = append(r.thr[0], got[0]), append(r.thr[1], got[1])
					r.thrRatio = append(r.thrRatio, got[1].reqs/got[0].reqs)
					r.cpuRat = append(r.cpuRat, cpuPerReq(got[1])/cpuPerReq(got[0]))
				} else {
					r.lat[0], r.lat[1] = append(r.lat[0], got[0]), append(r.lat[1], got[1])
					r.p50Delta = append(r.p50Delta, got[1].p50-got[0].p50)
					r.p99Delt = append(r.p99Delt, got[1].p99-got[0].p99)
				}
			}
		}
		rows = append(rows, r)
	}
	printReport(cfg, rows)
	return nil
}

// start starts a child process, pinned to cpu with -pin, its output in
// dir/NAME.log.
func start(cfg config, cpu, dir string, s child.Spec) (*child.Proc, error) {
	if cfg.pin {
		s.CPU = cpu
	}
	lf, err := os.Create(filepath.Join(dir, s.Name+".log"))
	if err != nil {
		return nil, err
	}
	s.Stdout, s.Stderr = lf, lf
	p, err := child.Start(context.Background(), s)
	if err != nil {
		lf.Close()
		return nil, err
	}
	go func() {
		<-p.Exited()
		lf.Close()
	}()
	return p, nil
}
