package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
)

// mode is how a node answers.
type mode int32

const (
	modeUp   mode = iota // a healthy simulated engine
	modeHang             // accepts connections and requests, never answers (health checks included)
	mode503              // answers 503 to everything (health checks included)
)

func (m mode) String() string {
	return [...]string{"up", "hang", "503"}[m]
}

// metricsMode is how a node answers a scrape of /metrics: as its engine
// does, or broken in one of the ways a real endpoint breaks.
type metricsMode int32

const (
	metricsUp       metricsMode = iota // the engine's own vLLM metrics
	metricsHang                        // accepts the scrape, never answers
	metricsStatus                      // 500
	metricsGarbage                     // a malformed exposition (and what crashed prometheus/common's parser)
	metricsTooLarge                    // 8 MiB of well-formed lines
	metricsLieBusy                     // claims a million waiting requests
	metricsLieIdle                     // claims nothing running, nothing waiting, whatever it has
)

func (m metricsMode) String() string {
	return [...]string{"up", "hang", "status 500", "garbage", "too large", "lies busy", "lies idle"}[m]
}

// node is one simulated engine on a fixed loopback address that the run
// can kill (its process dies: listener and connections closed), restart
// (a new engine, cold cache, same address), wedge or make fail.
type node struct {
	name string
	cfg  engine.Config

	mode    atomic.Int32
	metrics atomic.Int32  // a metricsMode
	scrapes atomic.Int64  // /metrics requests, whatever the mode
	release chan struct{} // closed at the end of the run: hung requests are aborted

	mu   sync.Mutex
	addr string // fixed after the first start
	eng  *engine.Engine
	srv  *http.Server
	up   bool

	// Counters by phase (see run.go): requests that reached the node's
	// handler (health checks excluded) and the ones it hung.
	reached [maxPhases]atomic.Int64
	hung    atomic.Int64
	phase   *atomic.Int32
}

func newNode(name string, cfg engine.Config, phase *atomic.Int32) *node {
	return &node{name: name, cfg: cfg, release: make(chan struct{}), phase: phase}
}

// start starts a fresh engine on the node's address (a free loopback port
// the first time).
func (n *node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.up {
		return nil
	}
	addr := n.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	eng, err := engine.New(n.cfg)
	if err != nil {
		ln.Close()
		return err
	}
	n.addr = ln.Addr().String()
	n.eng = eng
	n.srv = &http.Server{Handler: n}
	n.up = true
	go n.srv.Serve(ln)
	return nil
}

// kill closes the listener and every connection, in flight or idle, as a
// crashed process's kernel would, and stops the engine.
func (n *node) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.up {
		return
	}
	n.up = false
	n.srv.Close()
	n.eng.Close()
}

func (n *node) setMode(m mode) { n.mode.Store(int32(m)) }

func (n *node) engine() *engine.Engine {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.eng
}

func (n *node) setMetricsMode(m metricsMode) { n.metrics.Store(int32(m)) }

func (n *node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/metrics" {
		n.scrapes.Add(1)
		if n.serveMetricsFault(w, r) {
			return
		}
	}
	health := strings.HasPrefix(r.URL.Path, "/health")
	if !health && r.URL.Path != "/metrics" {
		n.reached[n.phase.Load()].Add(1)
	}
	switch mode(n.mode.Load()) {
	case modeHang:
		if !health {
			n.hung.Add(1)
		}
		select {
		case <-n.release:
			panic(http.ErrAbortHandler) // drop the connection: no answer, ever
		case <-r.Context().Done():
		}
		return
	case mode503:
		http.Error(w, `{"error":"engine unavailable"}`, http.StatusServiceUnavailable)
		return
	}
	eng := n.engine()
	if eng == nil {
		panic(http.ErrAbortHandler)
	}
	// Which engine answered, for the run's count of conversations that
	// kept one replica; Caddy passes response headers through.
	w.Header().Set(engineHeader, n.name)
	eng.ServeHTTP(w, r)
}

// serveMetricsFault answers a scrape as the node's metrics mode says,
// and reports false when the engine should answer it itself.
func (n *node) serveMetricsFault(w http.ResponseWriter, r *http.Request) bool {
	text := func(body string) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		io.WriteString(w, body)
	}
	switch metricsMode(n.metrics.Load()) {
	case metricsHang:
		select {
		case <-n.release:
		case <-r.Context().Done():
		}
	case metricsStatus:
		http.Error(w, "internal error", http.StatusInternalServerError)
	case metricsGarbage:
		text("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\" 3\n" +
			"#00000000000000\n# TYPE A0000000000000000000000000000000 histogrAm\n{A=\"\",A0=\"0\",A1=\"00\"}00")
	case metricsTooLarge:
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		line := "vllm:num_requests_waiting{model_name=\"" + strings.Repeat("m", 1000) + "\"} 1\n"
		for range 8 << 10 {
			if _, err := io.WriteString(w, line); err != nil {
				break
			}
		}
	case metricsLieBusy:
		text("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1e6\n" +
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1e6\n")
	case metricsLieIdle:
		text("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\n" +
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0\n")
	default:
		return false
	}
	return true
}

// close ends the node for good.
func (n *node) close() {
	select {
	case <-n.release:
	default:
		close(n.release)
	}
	n.kill()
}
