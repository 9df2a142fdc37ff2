// Command prefixbench measures load-balancing policies for LLM inference
// through a real Caddy: it starts simulated engines and Caddy in process,
// replays workloads against each policy in turn on a fresh fleet, and
// prints a markdown table per workload, optionally with JSON and an SVG
// chart.
//
//	go run ./bench/cmd/prefixbench -workload shared-prefix -qps 10,20,30
//	go run ./bench/cmd/prefixbench -workload mooncake -mooncake-duration 10m -time-scale 0.1
//	go run ./bench/cmd/prefixbench -smoke
//	go run ./bench/cmd/prefixbench -workload chat -edges 4 -sync redis
//	go run ./bench/cmd/prefixbench -render bench/results/shared-prefix.json
//
// With -edges N > 1, N Caddy processes with the same configuration stand
// in front of the fleet: the command re-executes itself as each edge (see
// driver.ServeEdgeIfChild), and the client sends each request to one at
// random. -sync redis starts a redis-server per run for them to share
// placements through.
//
// Progress goes to stderr, a line per policy and load.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	"github.com/prefixcache/caddy-prefixcache/bench/report"
	"github.com/prefixcache/caddy-prefixcache/bench/workload"
)

func main() {
	// With -edges > 1 this binary is also each edge, re-executed.
	driver.ServeEdgeIfChild()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "prefixbench:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	workloads  string
	policies   string
	qps        string
	users      string
	engines    int
	kvBlocks   int
	timeScale  float64
	seed       uint64
	caddyfile  string
	jsonOut    string
	svgOut     string
	mdOut      string
	smoke      bool
	render     string
	noBound    bool
	boundOnly  bool
	workingSet float64
	requests   int

	custom []string
	usage  bool

	mooncakePath     string
	mooncakeStart    time.Duration
	mooncakeDuration time.Duration
	mooncakeSample   float64
	mooncakeMax      int
	mooncakeSpread   time.Duration

	workloadName  string
	edges         int
	edgeProcesses bool
	edgesSent     int
	sync          string
}

func run() error {
	var o options
	flag.StringVar(&o.workloads, "workload", "shared-prefix", "comma-separated workloads: shared-prefix, chat, agent, rag (retrieval-augmented sessions), mooncake")
	flag.StringVar(&o.policies, "policies", strings.Join(driver.DefaultPolicyNames, ","), "comma-separated policies (empty, with -custom-policy: only those)")
	flag.StringVar(&o.qps, "qps", "", "comma-separated ladder of offered request rates (requests per simulated second); default: the workload's own rate")
	flag.StringVar(&o.users, "users", "", "comma-separated ladder of concurrent users, for a closed-loop replay instead of -qps")
	flag.IntVar(&o.engines, "engines", 8, "simulated engines behind Caddy")
	flag.IntVar(&o.kvBlocks, "kv-blocks", engine.DefaultKVBlocks, "KV cache blocks per engine (16 tokens each)")
	flag.Float64Var(&o.timeScale, "time-scale", 1, "wall seconds per simulated second, for the engines and the workload's times")
	flag.Uint64Var(&o.seed, "seed", 1, "workload seed")
	flag.StringVar(&o.caddyfile, "caddyfile", "", "Caddyfile with {$LISTEN} and {$UPSTREAMS} (default: the repository's Caddyfile.example)")
	flag.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	flag.StringVar(&o.svgOut, "svg", "", "write an SVG chart to this file")
	flag.StringVar(&o.mdOut, "md", "", "write the markdown tables to this file instead of stdout")
	flag.StringVar(&o.render, "render", "", "print the markdown tables of this -json file, as the run that wrote it printed them, and exit")
	flag.BoolVar(&o.smoke, "smoke", false, "run a few-second end-to-end check of the pipeline and exit non-zero if figures are missing")
	flag.BoolVar(&o.noBound, "no-bound", false, "skip the upper bound")
	flag.BoolVar(&o.boundOnly, "bound-only", false, "compute and print the workloads' upper bounds, run no policy")
	flag.Float64Var(&o.workingSet, "working-set", 0.73, "shared-prefix: working set as a fraction of the fleet's total KV cache")
	flag.IntVar(&o.requests, "requests", 0, "requests (shared-prefix), conversations (chat), runs (agent), sessions (rag), or most trace requests (mooncake); 0 for the default")
	flag.Func("custom-policy", "add a policy given as name=JSON selection_policy, e.g. 'pc_4k={\"policy\":\"prefix_cache\",\"min_match\":4096}' (repeatable)", func(s string) error {
		o.custom = append(o.custom, s)
		return nil
	})
	flag.BoolVar(&o.usage, "usage", false, "put the prefix_cache_usage handler in front of every reverse_proxy, so that prefix_cache reads the engines' answers (and, with engine_metrics' capacity on, learns their capacity from them)")
	flag.StringVar(&o.mooncakePath, "mooncake", "", "Mooncake trace (default: conversation_trace.jsonl in ../shared/data/mooncake of the repository)")
	flag.DurationVar(&o.mooncakeStart, "mooncake-start", 0, "replay the trace from this timestamp")
	flag.DurationVar(&o.mooncakeDuration, "mooncake-duration", 10*time.Minute, "replay this much of the trace (0: all)")
	flag.Float64Var(&o.mooncakeSample, "mooncake-sample", 1, "keep this fraction of the trace's conversations")
	o.mooncakeSpread = workload.SpreadGrid
	flag.Func("mooncake-spread", "spread the requests that share a trace timestamp uniformly over this much time after it, in their order, drawn by -seed; 'grid' (the default): over the step of the window's timestamps, ~3s on the conversation trace, the trace's resolution on one of distinct timestamps; 0: send them at once, the burst replay", func(s string) error {
		d, err := parseSpread(s)
		o.mooncakeSpread = d
		return err
	})
	flag.IntVar(&o.mooncakeMax, "mooncake-max-tokens", 0, "drop trace requests longer than this, input plus output (default: the engines' context)")
	flag.StringVar(&o.workloadName, "workload-name", "", "name the (single) workload this in the results, e.g. mooncake-synthetic or mooncake-w2, so peertable keeps traces and windows apart")
	flag.IntVar(&o.edges, "edges", 1, "Caddy instances in front of the fleet, each request to one at random (seeded by -seed); more than one run as child processes")
	flag.BoolVar(&o.edgeProcesses, "edge-process", false, "run even a single edge as a child process, to compare 1 and N edges with the same process layout")
	flag.IntVar(&o.edgesSent, "edges-sent", 0, "send every request to the first N of the -edges only, the others idle (and syncing): every edge process on this machine, the routing of N edges (default: all)")
	flag.StringVar(&o.sync, "sync", "", "how edges share placements: redis (starts a redis-server per run and sets prefix_cache's sync to it), or none")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := driver.RepoRoot()
	if err != nil && (o.caddyfile == "" || (o.mooncakePath == "" && strings.Contains(o.workloads, "mooncake"))) {
		return err
	}
	if o.render != "" {
		return render(os.Stdout, o.render)
	}
	if o.smoke {
		return smoke(ctx, root, o)
	}

	cfg, err := o.config(root)
	if err != nil {
		return err
	}
	if o.workloadName != "" && strings.Contains(o.workloads, ",") {
		return fmt.Errorf("-workload-name needs a single -workload, got %q", o.workloads)
	}
	var results []*driver.Result
	for name := range strings.SplitSeq(o.workloads, ",") {
		w, err := o.workload(strings.TrimSpace(name), root, cfg)
		if err != nil {
			return err
		}
		wcfg := cfg
		if len(wcfg.QPS) == 0 && len(wcfg.Users) == 0 {
			wcfg.QPS = []float64{roundRate(w.Rate)}
		}
		fmt.Fprintf(os.Stderr, "[%s] %s; %d requests; natural rate %.2f req/s\n", w.Name, w.Description, w.Requests(), w.Rate)
		if o.boundOnly {
			b, err := driver.UpperBound(ctx, w, cfg.Engine)
			if err != nil {
				return err
			}
			fmt.Printf("%s: upper bound token hit rate %.4f (%d of %d prompt tokens)\n", w.Name, b.HitRate, b.CachedTokens, b.PromptTokens)
			continue
		}
		res, err := driver.Benchmark(ctx, wcfg, w)
		if res != nil && len(res.Runs) > 0 {
			results = append(results, res)
		}
		if err != nil {
			writeOutputs(o, results)
			return err
		}
	}
	return writeOutputs(o, results)
}

// config builds the driver configuration from the flags.
func (o options) config(root string) (driver.Config, error) {
	var policies []driver.Policy
	if o.policies != "" || len(o.custom) == 0 { // -policies "" with -custom-policy: those alone
		var err error
		if policies, err = driver.ParsePolicies(o.policies); err != nil {
			return driver.Config{}, err
		}
	}
	for _, c := range o.custom {
		p, err := driver.ParseCustomPolicy(c)
		if err != nil {
			return driver.Config{}, err
		}
		policies = append(policies, p)
	}
	if o.usage {
		for i := range policies {
			policies[i].Usage = true
		}
	}
	qps, err := parseFloats(o.qps)
	if err != nil {
		return driver.Config{}, fmt.Errorf("-qps: %w", err)
	}
	users, err := parseInts(o.users)
	if err != nil {
		return driver.Config{}, fmt.Errorf("-users: %w", err)
	}
	path := o.caddyfile
	if path == "" {
		path = filepath.Join(root, "Caddyfile.example")
	}
	caddyfile, err := os.ReadFile(path)
	if err != nil {
		return driver.Config{}, err
	}
	sync, err := o.edgeTier()
	if err != nil {
		return driver.Config{}, err
	}
	ecfg := engine.DefaultConfig()
	ecfg.KVBlocks = o.kvBlocks
	ecfg.TimeScale = o.timeScale
	return driver.Config{
		Edges:         o.edges,
		EdgeProcesses: o.edgeProcesses,
		EdgeSeed:      o.seed,
		EdgesSent:     o.edgesSent,
		Sync:          sync,

		Engines:   o.engines,
		Engine:    ecfg,
		Caddyfile: caddyfile,
		Policies:  policies,
		QPS:       qps,
		Users:     users,
		NoBound:   o.noBound,
		Progress:  os.Stderr,
	}, nil
}

// edgeTier checks -edges and returns -sync's value.
func (o options) edgeTier() (sync string, err error) {
	if o.edges < 1 {
		return "", fmt.Errorf("-edges must be positive, got %d", o.edges)
	}
	if o.edgesSent < 0 || o.edgesSent > o.edges {
		return "", fmt.Errorf("-edges-sent must be from 0 to -edges (%d), got %d", o.edges, o.edgesSent)
	}
	sync, err = driver.ParseSync(o.sync)
	if err != nil {
		return "", fmt.Errorf("-sync: %w", err)
	}
	return sync, nil
}

// workload generates or loads the named workload.
func (o options) workload(name, root string, cfg driver.Config) (*workload.Workload, error) {
	kvTokens := cfg.Engines * cfg.Engine.KVBlocks * cfg.Engine.BlockSize
	n := o.requests
	var w *workload.Workload
	var err error
	switch name {
	case "shared-prefix":
		w, err = workload.LLMDSharedPrefix(kvTokens, o.workingSet, orDefault(n, 2000), o.seed).Generate()
	case "chat":
		w, err = workload.DefaultChat(orDefault(n, 200), o.seed).Generate()
	case "agent":
		w, err = workload.DefaultAgent(orDefault(n, 100), o.seed).Generate()
	case "rag":
		w, err = workload.DefaultRAG(orDefault(n, 100), o.seed).Generate()
	case "mooncake":
		path := o.mooncakePath
		if path == "" {
			path = filepath.Join(root, workload.DefaultMooncakeDir, "conversation_trace.jsonl")
		}
		maxTokens := o.mooncakeMax
		if maxTokens == 0 {
			// The engines' context, less room for the chat template.
			maxTokens = cfg.Engine.KVBlocks*cfg.Engine.BlockSize - 64
		}
		w, _, err = workload.Mooncake{
			Path:        path,
			Start:       o.mooncakeStart,
			Duration:    o.mooncakeDuration,
			Sample:      o.mooncakeSample,
			MaxTokens:   maxTokens,
			MaxRequests: n,
			Spread:      o.mooncakeSpread,
			Seed:        o.seed,
		}.Load()
	default:
		return nil, fmt.Errorf("unknown workload %q (known: shared-prefix, chat, agent, rag, mooncake)", name)
	}
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", name, err)
	}
	w.Model = cfg.Engine.Model
	if o.workloadName != "" {
		w.Name = o.workloadName
	}
	return w, nil
}

// writeOutputs prints the tables and writes the requested files.
func writeOutputs(o options, results []*driver.Result) error {
	md := os.Stdout
	if o.mdOut != "" {
		f, err := os.Create(o.mdOut)
		if err != nil {
			return err
		}
		defer f.Close()
		md = f
	}
	if err := report.Markdown(md, results); err != nil {
		return err
	}
	if o.jsonOut != "" {
		if err := writeFile(o.jsonOut, func(f *os.File) error { return report.JSON(f, results) }); err != nil {
			return err
		}
	}
	if o.svgOut != "" {
		if err := writeFile(o.svgOut, func(f *os.File) error { return report.SVG(f, results) }); err != nil {
			return err
		}
	}
	return nil
}

// render writes the markdown tables of the results in the -json file
// path: the tables the run printed, so that a results directory needs
// to keep only its JSON.
func render(w io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var results []*driver.Result
	if err := json.Unmarshal(b, &results); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return report.Markdown(w, results)
}

func writeFile(path string, write func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func orDefault(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// roundRate rounds a trace's natural rate to two significant digits, for
// readable tables.
func roundRate(r float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(r, 'g', 2, 64), 64)
	return v
}

// parseSpread parses -mooncake-spread: "grid" or a duration of at least
// zero.
func parseSpread(s string) (time.Duration, error) {
	if s == "grid" {
		return workload.SpreadGrid, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want grid or a duration of at least 0, got %q", s)
	}
	return d, nil
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("invalid rate %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("invalid count %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// smoke runs driver.Smoke, with the edge tier of the flags, and prints
// its tables.
func smoke(ctx context.Context, root string, o options) error {
	caddyfile, err := os.ReadFile(filepath.Join(root, "Caddyfile.example"))
	if err != nil {
		return err
	}
	sync, err := o.edgeTier()
	if err != nil {
		return err
	}
	results, err := driver.SmokeWith(ctx, caddyfile, os.Stderr, driver.SmokeOptions{
		Edges: o.edges, EdgeProcesses: o.edgeProcesses, EdgeSeed: o.seed, EdgesSent: o.edgesSent, Sync: sync,
	})
	if rerr := report.Markdown(os.Stdout, results); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("smoke check failed: %w", err)
	}
	fmt.Fprintln(os.Stderr, "smoke check passed")
	return nil
}
