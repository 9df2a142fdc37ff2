package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile" // the Caddyfile adapter
	_ "github.com/caddyserver/caddy/v2/modules/standard"      // reverse_proxy, least_conn

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	_ "github.com/prefixcache/caddy-prefixcache/caddymodule" // lb_policy prefix_cache
)

// The faults a run injects (Options.Fault).
const (
	// FaultEngines: engine 0 is killed (and later restarted with an
	// empty cache on the same address), engine 1 wedges (accepts, never
	// answers), engine 2 answers 503 to everything; engine 3 stays
	// healthy throughout.
	FaultEngines = "engines"

	// FaultRedis: the redis-server the edges share placements through is
	// killed with SIGKILL, and restarted, empty, on the same port after a
	// delay; every engine stays healthy. Expected: no request lost, none
	// delayed past the run's own noise (see Result.Delayed), since
	// prefix_cache never waits on Redis.
	FaultRedis = "redis"

	// FaultMetrics: prefix_cache scrapes the engines' /metrics
	// (engine_metrics), and the endpoints break while every engine keeps
	// serving: first each in another way (hanging, 500, garbage, a body
	// past the size bound), then they lie (a million requests queued on
	// two, none on another), then they recover. Expected: no request
	// lost, none delayed past the control run's, the same schedule with
	// engine_metrics off: a scrape never runs on the request path, and a
	// lie can at worst move requests between healthy engines.
	FaultMetrics = "metrics"
)

// The phases of an engines run, as fractions of its duration.
const (
	phaseWarm      = iota // all four engines healthy
	phaseKilled           // engine 0 dead
	phaseHung             // and engine 1 wedged
	phase503              // and engine 2 failing
	phaseRestarted        // engine 0 back, cold
	phaseDrain            // no new requests; the ones in flight finish
	maxPhases
)

var phaseNames = []string{"warm", "killed", "hung", "503", "restarted", "drain"}

// phaseStart is when each phase starts, as a fraction of the duration.
var phaseStart = []float64{0, 0.25, 0.35, 0.45, 0.65}

// The phases of a redis run: the restart comes 20% of the duration after
// the kill, and the run goes on as long again after it.
const (
	phaseRedisKilled    = 1 // redis-server dead
	phaseRedisRestarted = 2 // a new, empty redis-server on the same port
)

var (
	redisPhaseNames = []string{"warm", "redis killed", "redis restarted", "drain"}
	redisPhaseStart = []float64{0, 0.3, 0.5}
)

// The phases of a metrics run.
const (
	phaseMetricsBroken    = 1 // each endpoint broken in its own way
	phaseMetricsLying     = 2 // endpoints answering lies
	phaseMetricsRecovered = 3 // every endpoint its engine's again
)

var (
	metricsPhaseNames = []string{"warm", "metrics broken", "metrics lying", "metrics recovered", "drain"}
	metricsPhaseStart = []float64{0, 0.25, 0.5, 0.75}
	// metricsFaults is each engine's metrics mode in each phase after
	// warm.
	metricsFaults = [][4]metricsMode{
		phaseMetricsBroken:    {metricsHang, metricsStatus, metricsGarbage, metricsTooLarge},
		phaseMetricsLying:     {metricsLieBusy, metricsLieIdle, metricsLieBusy, metricsUp},
		phaseMetricsRecovered: {metricsUp, metricsUp, metricsUp, metricsUp},
	}
)

// engineMetricsOptions is prefix_cache's engine_metrics in a metrics run:
// scrapes ten times a second, so that every phase sees many of them.
const engineMetricsOptions = `{
			engine_metrics {
				interval 100ms
				timeout 100ms
			}
		}`

// delayFactor times the warm phase's p99 latency is the longest a request
// may take after the fault before it counts as delayed: the warm phase
// is the same clients, load and engines with nothing failed. On a shared
// machine, bursts of CPU contention delay a few requests past it in any
// run; the benchmark's own noise is then what a control run shows, the
// same schedule with no edge attached to Redis (see main), and a request
// path that waited on Redis would move the median of every phase after
// the kill, not a few requests.
const delayFactor = 2

// Options of one run.
type Options struct {
	Policy   string        // the lb_policy line: "prefix_cache" or "least_conn"
	Config   string        // "recommended" or "minimal" (see proxyOptions)
	Duration time.Duration // from the first request to the last new one
	Clients  int           // concurrent clients, each a sequence of conversations
	Timeout  time.Duration // a client gives up on a request after this long: lost
	Engine   engine.Config

	// Fault is FaultEngines (the default), FaultRedis or FaultMetrics.
	Fault string

	// EngineMetrics turns prefix_cache's engine_metrics on. FaultMetrics
	// without it is the control: the endpoints break, no one scrapes.
	EngineMetrics bool

	// Edges is the number of Caddy instances, each request going to one
	// at random; more than one run as child processes (the binary calls
	// driver.ServeEdgeIfChild). Default: 1, in this process.
	Edges int

	// Sync, when driver.SyncRedis, starts a redis-server and sets
	// prefix_cache's sync to it. FaultRedis without it kills a server no
	// edge uses: a control run of the fault's machinery.
	Sync string
}

// proxyOptions are the reverse_proxy options of each configuration.
//
// minimal is what the README's example shows: retries and an active
// health check (its interval shortened to suit a run of seconds).
//
// recommended adds what makes an engine's failure cost no request:
//   - lb_retry_match method POST: retry LLM requests (POSTs) after a
//     transport error once the connection was made (the engine died or
//     timed out mid-request); Caddy retries only GETs by default.
//   - lb_retry_match on {rp.status_code} 502/503/504: retry a request an
//     engine refused with a gateway error.
//   - request_buffers: keep the body (up to the size given) so that a
//     retry after it was sent can send it again; without it Caddy can
//     retry only requests whose body was never read.
//   - transport response_header_timeout: give up on an engine that
//     accepted the request and never answers. It must be longer than the
//     longest non-streaming generation (streaming responses send their
//     headers at once).
//   - passive health (fail_duration, max_fails, unhealthy_status 5xx):
//     take an engine out at its first failure, before the next active
//     check.
//   - active health with a health_timeout, which takes out a wedged
//     engine whose /health hangs too.
//
// In production scale the durations up: health_interval 5s,
// health_timeout 2s, fail_duration 30s, dial_timeout 2s,
// response_header_timeout above the longest non-streaming request
// (minutes), lb_try_duration a little above it.
var proxyOptions = map[string]string{
	"minimal": `
		lb_retries 2
		health_uri /health
		health_interval 100ms`,
	"recommended": `
		lb_retries 3
		lb_try_duration 5s
		lb_try_interval 50ms
		lb_retry_match {
			method POST
		}
		lb_retry_match {
			expression ` + "`{rp.status_code} in [502, 503, 504]`" + `
		}
		request_buffers 4MiB
		health_uri /health
		health_interval 100ms
		health_timeout 300ms
		fail_duration 1s
		max_fails 1
		unhealthy_status 5xx
		transport http {
			dial_timeout 500ms
			response_header_timeout 1s
		}`,
}

// Result of one run.
type Result struct {
	Policy, Config string
	Fault, Sync    string
	Edges          int
	Phases         []string // the phases' names, by index
	Sent, OK, Lost int
	LostBy         map[string]int // cause: "status 502", "timeout", ...
	LostIn         [maxPhases]int // by the phase the request was sent in
	Reached        [4][maxPhases]int64
	Hung           [4]int64 // requests engine i held while wedged
	P50, P99       time.Duration
	Restarted      int64 // requests engine 0 served after its restart
	EngineMetrics  bool
	Scrapes        [4]int64 // /metrics requests each engine received

	// PhaseP50 and PhaseP99 are latencies of the requests served, by the
	// phase they were sent in. Delayed counts the requests sent after the
	// warm phase that took longer than DelayThreshold, delayFactor x the
	// warm phase's p99.
	PhaseP50       [maxPhases]time.Duration
	PhaseP99       [maxPhases]time.Duration
	Delayed        int
	DelayThreshold time.Duration

	// Conversations and Kept count, by kind (shortPrompt, sharedPrompt)
	// and by phase, the conversations that had at least two turns served
	// in that phase, and those of them whose turns in that phase were all
	// served by one engine: a conversation that moves pays its whole
	// prefill again.
	Conversations [2][maxPhases]int
	Kept          [2][maxPhases]int

	// Moves counts, by kind and by phase, the turns served by another
	// engine than their conversation's previous turn in the same phase,
	// by the reason prefix_cache gave for the moved turn's placement
	// (driver.ReasonHeader; "" for another policy): what moved the
	// conversations that did not keep one replica.
	Moves [2][maxPhases]map[string]int
}

// The kinds of conversation of a run: every other one opens with a long
// system prompt shared with other conversations (~3 KB), the others with
// a short one of their own, so that their whole text stays under
// prefix_cache's default min_match.
const (
	shortPrompt  = 0
	sharedPrompt = 1
)

// engineHeader names the engine that answered, set by each node.
const engineHeader = "X-Engine"

// keptOneReplica counts, by phase, the conversations with at least two
// turns served in that phase (conversations) and those of them whose
// turns in it all went to one engine (kept). turns holds, for each
// conversation, the phase and the engine of each served turn in order.
func keptOneReplica(turns [][]servedTurn) (conversations, kept [maxPhases]int) {
	for _, conv := range turns {
		var n [maxPhases]int
		var first [maxPhases]string
		var moved [maxPhases]bool
		for _, t := range conv {
			if n[t.phase] == 0 {
				first[t.phase] = t.engine
			} else if t.engine != first[t.phase] {
				moved[t.phase] = true
			}
			n[t.phase]++
		}
		for p := range maxPhases {
			if n[p] < 2 {
				continue
			}
			conversations[p]++
			if !moved[p] {
				kept[p]++
			}
		}
	}
	return conversations, kept
}

// movesByReason counts, by phase, the turns served by another engine
// than the previous turn of their conversation in the same phase, by the
// reason of the moved turn's placement.
func movesByReason(turns [][]servedTurn) (moves [maxPhases]map[string]int) {
	for p := range moves {
		moves[p] = map[string]int{}
	}
	for _, conv := range turns {
		for i := 1; i < len(conv); i++ {
			prev, t := conv[i-1], conv[i]
			if t.phase == prev.phase && t.engine != prev.engine {
				moves[t.phase][t.reason]++
			}
		}
	}
	return moves
}

// servedTurn is one served turn of a conversation: the phase it was sent
// in, the engine that answered it, and the reason prefix_cache gave for
// its placement.
type servedTurn struct {
	phase  int32
	engine string
	reason string
}

// Run starts four engines and a Caddy in front of them, sends
// opts.Clients concurrent conversations for opts.Duration while the
// faults happen, and counts the requests lost: any request whose client
// did not get a 200 with a completion.
func Run(ctx context.Context, opts Options) (Result, error) {
	if opts.Fault == "" {
		opts.Fault = FaultEngines
	}
	opts.Edges = max(1, opts.Edges)
	res := Result{Policy: opts.Policy, Config: opts.Config, Fault: opts.Fault, Edges: opts.Edges, LostBy: map[string]int{}}
	proxyOpts, ok := proxyOptions[opts.Config]
	if !ok {
		return res, fmt.Errorf("unknown config %q", opts.Config)
	}
	if opts.Fault != FaultEngines && opts.Fault != FaultRedis && opts.Fault != FaultMetrics {
		return res, fmt.Errorf("unknown fault %q", opts.Fault)
	}
	policyBlock := ""
	if opts.EngineMetrics {
		if opts.Policy != "prefix_cache" {
			return res, fmt.Errorf("engine_metrics is an option of prefix_cache, not %s", opts.Policy)
		}
		policyBlock = engineMetricsOptions
		res.EngineMetrics = true
	}
	if _, err := driver.ParseSync(opts.Sync); err != nil {
		return res, err
	}
	var phase atomic.Int32
	nodes := make([]*node, 4)
	var dials []string
	for i := range nodes {
		nodes[i] = newNode(fmt.Sprintf("engine%d", i), opts.Engine, &phase)
		if err := nodes[i].start(); err != nil {
			return res, err
		}
		defer nodes[i].close()
		dials = append(dials, nodes[i].addr)
	}

	var redis *driver.Redis
	if opts.Sync == driver.SyncRedis || opts.Fault == FaultRedis {
		r, err := driver.StartRedis(ctx)
		if err != nil {
			return res, err
		}
		defer r.Stop()
		redis = r
	}

	// The edges' listeners and Caddy's http_port and https_port, held
	// open together so that no two are the same port.
	ports, err := driver.ReservePorts(opts.Edges + 2)
	if err != nil {
		return res, err
	}
	listens := ports[:opts.Edges]
	httpPort, httpsPort := portOf(ports[opts.Edges]), portOf(ports[opts.Edges+1])
	storage, err := os.MkdirTemp("", "faults-caddy")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(storage)
	configs := make([][]byte, len(listens))
	for i, listen := range listens {
		caddyfile := fmt.Sprintf(`{
	admin off
	persist_config off
	storage file_system %s
	http_port %d
	https_port %d
}
http://%s {
	reverse_proxy %s {
		lb_policy %s %s
		%s
	}
}
`, storage, httpPort, httpsPort, listen, strings.Join(dials, " "), opts.Policy, policyBlock, proxyOpts)
		// Adapted as prefixbench adapts its Caddyfiles: prefix_cache's
		// prefill_rate and intervals follow the engines' simulated clock,
		// so that its estimate of their queues drains as fast as they do.
		cfg, err := driver.AdaptCaddyfile([]byte(caddyfile), nil, driver.Policy{}, opts.Engine.TimeScale)
		if err != nil {
			return res, fmt.Errorf("%w\n%s", err, caddyfile)
		}
		if cfg, err = discardLogs(cfg); err != nil {
			return res, err
		}
		if opts.Sync == driver.SyncRedis {
			var found int
			if cfg, found, err = driver.WithSync(cfg, driver.SyncRedis, redis.URL()); err != nil {
				return res, err
			}
			if found > 0 {
				res.Sync = opts.Sync
			}
		}
		configs[i] = cfg
	}
	var edges []*driver.Edge
	if len(configs) == 1 {
		if err := caddy.Load(configs[0], true); err != nil {
			return res, fmt.Errorf("loading Caddy: %w", err)
		}
		defer caddy.Stop()
	} else {
		if edges, err = driver.StartEdges(ctx, configs, listens); err != nil {
			return res, fmt.Errorf("starting %d edges: %w", len(configs), err)
		}
		defer driver.StopEdges(edges)
	}
	urls := make([]string, len(listens))
	for i, l := range listens {
		urls[i] = "http://" + l + "/v1/chat/completions"
	}

	// The clients: each runs conversations of up to 6 turns, until the run
	// stops sending. Every other conversation opens with one of 8 long
	// shared system prompts (prefix_cache sends it where that prompt is
	// cached); the others with a short one, so prefix_cache places them by
	// their opening, over every engine, and keeps their later turns there.
	// Each request goes to an edge drawn at random (client c's own seeded
	// stream), so a conversation's turns land on different edges.
	sending, stopSending := context.WithCancel(ctx)
	defer stopSending()
	type outcome struct {
		phase   int32
		latency time.Duration
		lost    string // "" when served
	}
	var convMu sync.Mutex
	var convTurns [2][][]servedTurn // by kind
	outcomes := make(chan outcome, 1024)
	var clients sync.WaitGroup
	for c := range opts.Clients {
		clients.Go(func() {
			client := &http.Client{Timeout: opts.Timeout}
			edge := rand.New(rand.NewPCG(uint64(c), 0x65646765))
			for conv := 0; sending.Err() == nil; conv++ {
				system, kind := "You are a helpful assistant.", shortPrompt
				if conv%2 == 0 {
					system, kind = systemPrompts[(c+conv/2)%len(systemPrompts)], sharedPrompt
				}
				var history []string
				var served []servedTurn
				for turn := 0; turn < 6 && sending.Err() == nil; turn++ {
					history = append(history, fmt.Sprintf("client %d conversation %d turn %d: %s", c, conv, turn, question))
					p := phase.Load()
					start := time.Now()
					answer, by, reason, lost := ask(ctx, client, urls[edge.IntN(len(urls))], system, history)
					outcomes <- outcome{p, time.Since(start), lost}
					if lost != "" {
						break // the user gives up on this conversation
					}
					served = append(served, servedTurn{p, by, reason})
					history = append(history, answer)
				}
				convMu.Lock()
				convTurns[kind] = append(convTurns[kind], served)
				convMu.Unlock()
			}
		})
	}
	var collected sync.WaitGroup
	var latencies []time.Duration
	var byPhase [maxPhases][]time.Duration
	collected.Go(func() {
		for o := range outcomes {
			res.Sent++
			if o.lost == "" {
				res.OK++
				latencies = append(latencies, o.latency)
				byPhase[o.phase] = append(byPhase[o.phase], o.latency)
				continue
			}
			res.Lost++
			res.LostBy[o.lost]++
			res.LostIn[o.phase]++
		}
	})

	// The faults, on schedule.
	start := time.Now()
	at := func(f float64) <-chan time.Time {
		return time.After(time.Until(start.Add(time.Duration(f * float64(opts.Duration)))))
	}
	starts, steps := phaseStart, []func() error{
		func() error { nodes[0].kill(); return nil },
		func() error { nodes[1].setMode(modeHang); return nil },
		func() error { nodes[2].setMode(mode503); return nil },
		func() error { return nodes[0].start() },
	}
	res.Phases = phaseNames
	if opts.Fault == FaultRedis {
		starts, steps = redisPhaseStart, []func() error{
			redis.Kill,
			func() error { return redis.Restart(ctx) },
		}
		res.Phases = redisPhaseNames
	}
	if opts.Fault == FaultMetrics {
		starts, steps = metricsPhaseStart, nil
		for _, modes := range metricsFaults[1:] {
			steps = append(steps, func() error {
				for i, m := range modes {
					nodes[i].setMetricsMode(m)
				}
				return nil
			})
		}
		res.Phases = metricsPhaseNames
	}
	for i, step := range steps {
		select {
		case <-at(starts[i+1]):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		phase.Store(int32(i + 1))
		if err := step(); err != nil {
			return res, fmt.Errorf("phase %s: %w", res.Phases[i+1], err)
		}
	}
	select {
	case <-at(1):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	phase.Store(int32(len(res.Phases) - 1)) // drain
	stopSending()
	// Requests in flight finish, or time out at the client; then the
	// wedged engine's held requests are aborted (they were lost anyway).
	drained := make(chan struct{})
	go func() { clients.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(opts.Timeout + time.Second):
		close(nodes[1].release)
		<-drained
	}
	close(outcomes)
	collected.Wait()

	for i, n := range nodes {
		for p := range maxPhases {
			res.Reached[i][p] = n.reached[p].Load()
		}
		res.Hung[i] = n.hung.Load()
		res.Scrapes[i] = n.scrapes.Load()
	}
	if e := nodes[0].engine(); e != nil {
		res.Restarted = e.Stats().Finished
	}
	slices.Sort(latencies)
	if len(latencies) > 0 {
		res.P50 = latencies[len(latencies)/2]
		res.P99 = latencies[len(latencies)*99/100]
	}
	for p, ls := range byPhase {
		if len(ls) > 0 {
			slices.Sort(ls)
			res.PhaseP50[p] = ls[len(ls)/2]
			res.PhaseP99[p] = ls[len(ls)*99/100]
		}
	}
	for kind, turns := range convTurns {
		res.Conversations[kind], res.Kept[kind] = keptOneReplica(turns)
		res.Moves[kind] = movesByReason(turns)
	}
	res.DelayThreshold = delayFactor * res.PhaseP99[phaseWarm]
	for _, ls := range byPhase[phaseWarm+1:] {
		for _, l := range ls {
			if l > res.DelayThreshold {
				res.Delayed++
			}
		}
	}
	// An edge or the redis-server that died during the run fails it.
	if edges != nil {
		if err := driver.StopEdges(edges); err != nil {
			return res, err
		}
	}
	if redis != nil {
		if err := redis.Stop(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// discardLogs sets a JSON config's logs to be discarded: the faults make
// Caddy log every failed attempt, and the run reports them itself.
func discardLogs(cfg []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(cfg, &m); err != nil {
		return nil, fmt.Errorf("decoding adapted config: %w", err)
	}
	m["logging"] = map[string]any{"logs": map[string]any{"default": map[string]any{"writer": map[string]any{"output": "discard"}}}}
	return json.Marshal(m)
}

// ask sends one chat turn and returns the assistant's answer, the engine
// that gave it and the reason prefix_cache gave for its placement, or why
// the request was lost.
func ask(ctx context.Context, client *http.Client, url, system string, history []string) (answer, engine, reason, lost string) {
	msgs := []map[string]string{{"role": "system", "content": system}}
	for i, h := range history {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": h})
	}
	body, _ := json.Marshal(map[string]any{"model": "sim", "messages": msgs, "max_tokens": 8})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "", "", "", "client timeout"
		}
		return "", "", "", "transport error"
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", "", "truncated response"
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", "", fmt.Sprintf("status %d", resp.StatusCode)
	}
	var completion struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(out, &completion) != nil || len(completion.Choices) == 0 {
		return "", "", "", "not a completion"
	}
	return completion.Choices[0].Message.Content, resp.Header.Get(engineHeader), resp.Header.Get(driver.ReasonHeader), ""
}

// systemPrompts are 8 long shared system prompts (~3 KB each), so that
// prefix_cache has affinity to keep and to lose.
var systemPrompts = func() []string {
	var ps []string
	for g := range 8 {
		var sb strings.Builder
		for i := 0; sb.Len() < 3000; i++ {
			fmt.Fprintf(&sb, "rule %d of assistant group %d: answer briefly and cite the policy. ", i, g)
		}
		ps = append(ps, sb.String())
	}
	return ps
}()

const question = "please summarise the previous answer and add one more detail about load balancing"

// portOf is the port of a host:port address.
func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
