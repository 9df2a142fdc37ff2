package main

import (
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

// node is one simulated engine on a fixed loopback address that the run
// can kill (its process dies: listener and connections closed), restart
// (a new engine, cold cache, same address), wedge or make fail.
type node struct {
	name string
	cfg  engine.Config

	mode    atomic.Int32
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

func (n *node) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	health := strings.HasPrefix(r.URL.Path, "/health")
	if !health {
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
	eng.ServeHTTP(w, r)
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
