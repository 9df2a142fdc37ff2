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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/child"
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
	flag.StringVar(&cfg.backend, "backend", "", "backend binary (go build -o /tmp/backend ./bench/overhead/cmd/backend)")
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

// result is one wrk run.
type result struct {
	reqs      float64 // requests/s
	p50, p99  time.Duration
	requests  int
	errors    int     // socket errors and non-2xx responses
	caddyCPU  float64 // Caddy's CPU seconds during the run
	caddyUtil float64 // caddyCPU / run length
}

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

	type row struct {
		size              int
		body              int
		reasons           map[string]int
		thr, lat          [2][]result
		thrRatio, cpuRat  []float64
		p50Delta, p99Delt []time.Duration
	}
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
	return nil
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

// caddyConfig serves round_robin on basePort, prefix_cache on basePort+1
// (with -compare usage: prefix_cache, and prefix_cache behind
// prefix_cache_usage),
// and on basePort+2 prefix_cache with a response header naming its
// reason, for the routing check only (the header is not free, so the
// measured sites do without it). Logging is at ERROR, access logs off.
func caddyConfig(cfg config, backends []string) string {
	ups := strings.Join(backends, " ")
	site := func(port int, policy, extra string) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy %s {\n\t\tlb_policy %s\n%s\t}\n}\n", port, ups, policy, extra)
	}
	admin := "admin off"
	if cfg.pprof != "" {
		admin = fmt.Sprintf("admin 127.0.0.1:%d", cfg.basePort+3)
	}
	global := fmt.Sprintf("{\n\t%s\n\tpersist_config off\n\tauto_https off\n\tlog default {\n\t\tlevel ERROR\n\t}\n}\n", admin)
	if cfg.compare == "usage" {
		usage := fmt.Sprintf("http://127.0.0.1:%d {\n\tprefix_cache_usage\n\treverse_proxy %s {\n\t\tlb_policy prefix_cache\n\t}\n}\n", cfg.basePort+1, ups)
		return global +
			site(cfg.basePort, "prefix_cache", "") +
			usage +
			site(cfg.basePort+2, "prefix_cache", "\t\theader_down X-Prefix-Cache-Reason {http.reverse_proxy.prefix_cache.reason}\n")
	}
	return global +
		site(cfg.basePort, "round_robin", "") +
		site(cfg.basePort+1, "prefix_cache", "") +
		site(cfg.basePort+2, "prefix_cache", "\t\theader_down X-Prefix-Cache-Reason {http.reverse_proxy.prefix_cache.reason}\n")
}

// checkRouting sends every conversation of size twice through the check
// site and counts the reasons prefix_cache gave: the bodies must be
// routed on (match, cold...), not left to the fallback.
func checkRouting(cfg config, dir string, size, convs int) (map[string]int, error) {
	reasons := map[string]int{}
	client := &http.Client{Timeout: 10 * time.Second}
	for range 2 {
		for i := range convs {
			body, err := os.ReadFile(bodyPath(dir, size, i))
			if err != nil {
				return nil, err
			}
			resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", cfg.basePort+2), "application/json", bytes.NewReader(body))
			if err != nil {
				return nil, err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("check request: status %s", resp.Status)
			}
			reasons[resp.Header.Get("X-Prefix-Cache-Reason")]++
		}
	}
	if reasons["fallback"] > 0 {
		return reasons, fmt.Errorf("prefix_cache left %d check requests to the fallback: %v", reasons["fallback"], reasons)
	}
	return reasons, nil
}

// profile loads each policy's site with wrk in throughput mode while it
// takes a CPU profile and an allocation profile (a delta over the same
// interval) of the Caddy process through its admin endpoint's
// /debug/pprof, and writes them as DIR/{cpu,allocs}-SIZE-POLICY.pprof.
// Read them with go tool pprof (the Caddy binary is not needed: Go
// profiles carry symbols).
func profile(cfg config, caddy *child.Proc, size int, script string) error {
	if err := os.MkdirAll(cfg.pprof, 0o755); err != nil {
		return err
	}
	secs := max(1, int(cfg.pprofDur.Seconds()))
	for p, policy := range policies {
		type fetched struct {
			name string
			err  error
		}
		done := make(chan fetched, 2)
		for _, kind := range []string{"profile", "allocs"} {
			name := "cpu"
			if kind == "allocs" {
				name = "allocs"
			}
			file := filepath.Join(cfg.pprof, fmt.Sprintf("%s-%s-%s.pprof", name, sizeName(size), policy))
			url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/%s?seconds=%d", cfg.basePort+3, kind, secs)
			go func() { done <- fetched{file, fetch(url, file)} }()
		}
		// The load starts with the profiles and outlasts them by two seconds.
		if _, err := wrk(cfg, caddy, cfg.basePort+p, script, cfg.conns, time.Duration(secs+2)*time.Second); err != nil {
			return err
		}
		for range 2 {
			f := <-done
			if f.err != nil {
				return fmt.Errorf("profiling %s: %w", policy, f.err)
			}
			log.Printf("wrote %s", f.name)
		}
	}
	return nil
}

func fetch(url, file string) error {
	resp, err := (&http.Client{Timeout: time.Minute}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
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

// wrk runs one wrk pass against port and returns its figures, with the
// CPU time Caddy used meanwhile.
func wrk(cfg config, caddy *child.Proc, port int, script string, conns int, d time.Duration) (result, error) {
	args := []string{"-t", strconv.Itoa(min(cfg.threads, conns)), "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%.0fs", d.Seconds()),
		"--latency", "--timeout", "10s", "-s", script, fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)}
	bin := cfg.wrk
	if cfg.pin {
		args = append([]string{"-c", "0", bin}, args...)
		bin = "taskset"
	}
	before, err := procCPU(caddy.Pid())
	if err != nil {
		return result{}, err
	}
	t0 := time.Now()
	out, err := exec.Command(bin, args...).CombinedOutput()
	elapsed := time.Since(t0)
	if err != nil {
		return result{}, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	after, err := procCPU(caddy.Pid())
	if err != nil {
		return result{}, err
	}
	res, err := parseWrk(string(out))
	if err != nil {
		return result{}, fmt.Errorf("%w\n%s", err, out)
	}
	res.caddyCPU = after - before
	res.caddyUtil = res.caddyCPU / elapsed.Seconds()
	return res, nil
}

var (
	reReqs     = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reTotal    = regexp.MustCompile(`(\d+) requests in`)
	rePct      = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([0-9.]+)(us|ms|s)\s*$`)
	reNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reSockErrs = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

func parseWrk(out string) (result, error) {
	var r result
	m := reReqs.FindStringSubmatch(out)
	if m == nil {
		return r, errors.New("wrk output has no Requests/sec")
	}
	r.reqs, _ = strconv.ParseFloat(m[1], 64)
	if m := reTotal.FindStringSubmatch(out); m != nil {
		r.requests, _ = strconv.Atoi(m[1])
	}
	for _, m := range rePct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		unit := map[string]float64{"us": 1e3, "ms": 1e6, "s": 1e9}[m[3]]
		d := time.Duration(v * unit)
		if m[1] == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	if r.p99 == 0 {
		return r, errors.New("wrk output has no latency distribution")
	}
	if m := reNon2xx.FindStringSubmatch(out); m != nil {
		n, _ := strconv.Atoi(m[1])
		r.errors += n
	}
	if m := reSockErrs.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.Atoi(s)
			r.errors += n
		}
	}
	return r, nil
}

// procCPU returns the user+system CPU seconds of process pid.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields count from after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks, nil
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

func numCPU() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "processor") {
			n++
		}
	}
	return n
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// Bodies: convs OpenAI chat requests of about size bytes, distinct from
// their first chunk (each system prompt starts with its conversation
// number), written as files, and a wrk script that sends them in turn.

func bodyPath(dir string, size, i int) string {
	return filepath.Join(dir, fmt.Sprintf("body-%s-%03d.json", sizeName(size), i))
}

func writeBodies(dir string, size, convs int) (script string, bodyLen int, err error) {
	for i := range convs {
		b := chatBody(size, uint64(i))
		bodyLen = len(b)
		if err := os.WriteFile(bodyPath(dir, size, i), b, 0o644); err != nil {
			return "", 0, err
		}
	}
	script = filepath.Join(dir, fmt.Sprintf("chat-%s.lua", sizeName(size)))
	lua := fmt.Sprintf(`-- sends the %d bodies in turn, preformatted once per thread
local reqs = {}
local n = %d
init = function(args)
  for i = 1, n do
    local f = assert(io.open(string.format(%q, i - 1), "rb"))
    local body = f:read("*a")
    f:close()
    reqs[i] = wrk.format("POST", "/v1/chat/completions", {["Content-Type"] = "application/json"}, body)
  end
end
local k = 0
request = function()
  k = k %% n + 1
  return reqs[k]
end
`, convs, convs, filepath.Join(dir, fmt.Sprintf("body-%s-%%03d.json", sizeName(size))))
	return script, bodyLen, os.WriteFile(script, []byte(lua), 0o644)
}

var words = strings.Fields(`the of and to in is that for it as with was on be by at this are
from or an which have not but had they you were there been one all we their has would when if so
no what can out other into more some could them than then its only also time two may about over
new like after these should any most such how where just those through very before well because
each much good model cache request server token prompt prefix replica engine latency throughput
café naïve résumé façade déjà Zürich São Kraków — → ✓ 数据 東京`)

// chatBody is the generator of caddymodule's benchmarks: a system prompt,
// then alternating user and assistant turns of 20 to 140 words of prose
// with quotes, line breaks and non-ASCII, compact JSON with raw UTF-8, of
// at least size bytes.
func chatBody(size int, conv uint64) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type request struct {
		Model       string    `json:"model"`
		Messages    []message `json:"messages"`
		Stream      bool      `json:"stream"`
		Temperature float64   `json:"temperature"`
		MaxTokens   int       `json:"max_tokens"`
	}
	r := rand.New(rand.NewPCG(conv, uint64(size)))
	req := request{
		Model: "meta-llama/Llama-3.1-8B-Instruct",
		Messages: []message{{"system", fmt.Sprintf("%016x You are a helpful, precise assistant for a software company.\n"+
			"Answer in the user's language. Cite sources as [n]. Prefer short paragraphs.\n", conv)}},
		Temperature: 0.7,
		MaxTokens:   512,
	}
	n := 200
	for i := 0; n < size; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		m := message{role, prose(r, 20+r.IntN(120))}
		req.Messages = append(req.Messages, m)
		n += len(m.Content) + 40
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(req); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func prose(r *rand.Rand, n int) string {
	var sb strings.Builder
	for i := range n {
		w := words[r.IntN(len(words))]
		switch r.IntN(40) {
		case 0:
			w = `"` + w + `"`
		case 1:
			w = "`" + w + "()`"
		}
		sb.WriteString(w)
		switch {
		case i == n-1:
			sb.WriteByte('.')
		case r.IntN(12) == 0:
			sb.WriteString(".\n")
		case r.IntN(10) == 0:
			sb.WriteString(", ")
		default:
			sb.WriteByte(' ')
		}
	}
	return sb.String()
}
