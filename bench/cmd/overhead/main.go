// Command overhead measures what lb_policy prefix_cache costs a real Caddy
// against lb_policy round_robin, end to end: wrk sends OpenAI chat bodies
// through a Caddy process to a trivial fast backend process, and the
// command reports requests per second, latency percentiles and Caddy's
// CPU time per request for both policies, measured in the same run with
// the runs interleaved A/B/B/A so that drift in the machine's load falls
// on both alike.
//
// Two modes per body size:
//
//   - throughput: -conns connections, closed loop, Caddy saturated. The
//     figure is requests/s and its ratio prefix_cache / round_robin.
//   - latency: one connection, one request at a time, so latency is
//     service time without queueing. The figure is the p50 and p99 added
//     by prefix_cache.
//
// With -compare usage, the two sides are prefix_cache alone and
// prefix_cache behind the prefix_cache_usage handler, which reads every
// answer; -stream N makes the backend stream each answer as N SSE chunks,
// each flushed, as an engine streams tokens, so that the figure is what
// reading answers costs at streaming rates.
//
// Both Caddy instances run at once, each on its own port, so neither is
// restarted between runs; the idle one costs nothing. With -pin, Caddy
// runs on CPU 1 and wrk and the backend on CPU 0 (taskset), so that the
// proxy, not the load generator, is the bottleneck, and Caddy's CPU time
// is not shared with them.
//
// Usage (bench/overhead/run.sh builds the binaries and installs wrk):
//
//	overhead -caddy /tmp/caddy -backend /tmp/backend [-sizes 2KB,32KB,256KB] [-rounds 3] [-duration 8s]
//	overhead -caddy /tmp/caddy -backend /tmp/backend -compare usage -stream 200 -sizes 2KB
package main

import (
	"flag"
	"fmt"
	"log"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

type config struct {
	caddy, backend, wrk string
	sizes               []int
	rounds              int
	duration, warmup    time.Duration
	conns, threads      int
	convs               int
	upstreams           int
	pin                 bool
	dir                 string
	basePort            int
	pprof               string        // directory for profiles of the Caddy process; "" for none
	pprofDur            time.Duration // length of each profile
	compare             string        // "policy" (round_robin vs prefix_cache) or "usage"
	stream              int           // the backend's SSE chunks per answer; 0 for JSON
}

func main() {
	var cfg config
	var sizes string
	flag.StringVar(&cfg.caddy, "caddy", "", "Caddy binary with the prefix_cache module (go build -o /tmp/caddy ./cmd/caddy)")
	flag.StringVar(&cfg.backend, "backend", "", "backend binary (go build -o /tmp/backend ./bench/cmd/backend)")
	flag.StringVar(&cfg.wrk, "wrk", "wrk", "wrk binary")
	flag.StringVar(&sizes, "sizes", "2KB,32KB,256KB", "chat body sizes")
	flag.IntVar(&cfg.rounds, "rounds", 3, "A/B rounds per size and mode (each round runs both policies)")
	flag.DurationVar(&cfg.duration, "duration", 8*time.Second, "length of one wrk run")
	flag.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "length of the warm-up run of each policy and size")
	flag.IntVar(&cfg.conns, "conns", 16, "connections in throughput mode")
	flag.IntVar(&cfg.threads, "threads", 1, "wrk threads")
	flag.IntVar(&cfg.convs, "convs", 64, "distinct conversations per size (wrk cycles through them)")
	flag.IntVar(&cfg.upstreams, "upstreams", 4, "backend ports (upstreams)")
	flag.BoolVar(&cfg.pin, "pin", true, "pin Caddy to CPU 1, wrk and the backend to CPU 0 (needs taskset and 2 CPUs)")
	flag.StringVar(&cfg.dir, "dir", "", "work directory (default: a new temporary one)")
	flag.IntVar(&cfg.basePort, "port", 18800, "first port: Caddy round_robin, +1 prefix_cache, +2 a check site, +3 the admin endpoint (with -pprof), +10.. the backend")
	flag.StringVar(&cfg.pprof, "pprof", "", "write CPU and allocation profiles of the Caddy process under load (each policy, each size) to this directory; enables Caddy's admin endpoint on port+3 for /debug/pprof")
	flag.DurationVar(&cfg.pprofDur, "pprof-duration", 10*time.Second, "length of each profile (with -pprof)")
	flag.StringVar(&cfg.compare, "compare", "policy", "policy: round_robin against prefix_cache; usage: prefix_cache against prefix_cache behind prefix_cache_usage")
	flag.IntVar(&cfg.stream, "stream", 0, "the backend streams each answer as this many SSE chunks (0: one JSON answer)")
	flag.Parse()
	switch cfg.compare {
	case "policy":
	case "usage":
		policies = []string{"prefix_cache", "prefix_cache+usage"}
		short = []string{"pc", "pc+usage"}
	default:
		log.Fatalf("overhead: -compare must be policy or usage, got %q", cfg.compare)
	}
	log.SetFlags(0)
	if cfg.caddy == "" || cfg.backend == "" {
		log.Fatal("overhead: -caddy and -backend are required")
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := parseSize(s)
		if err != nil {
			log.Fatalf("overhead: -sizes: %v", err)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	if cfg.pin {
		if _, err := exec.LookPath("taskset"); err != nil {
			log.Printf("overhead: taskset not found, not pinning")
			cfg.pin = false
		}
	}
	if err := run(cfg); err != nil {
		log.Fatalf("overhead: %v", err)
	}
}

func parseSize(s string) (int, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := 1
	switch {
	case strings.HasSuffix(s, "MB"):
		mult, s = 1<<20, strings.TrimSuffix(s, "MB")
	case strings.HasSuffix(s, "KB"):
		mult, s = 1<<10, strings.TrimSuffix(s, "KB")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

func sizeName(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%dMB", n>>20)
	}
	return fmt.Sprintf("%dKB", n>>10)
}

// policies are the two sides compared, short their short names.
var (
	policies = []string{"round_robin", "prefix_cache"}
	short    = []string{"rr", "pc"}
)
