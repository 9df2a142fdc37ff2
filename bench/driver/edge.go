package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/prefixcache/caddy-prefixcache/bench/child"
)

// EdgeEnv is the environment variable that makes a benchmark binary serve
// as an edge instead of running its main (see ServeEdgeIfChild).
const EdgeEnv = "PREFIXBENCH_EDGE"

// edgeReady is the line an edge writes to its stdout once Caddy listens.
const edgeReady = "prefixbench edge ready"

// Bounds on an edge's life, in wall time.
const (
	// edgeStartTimeout bounds the wait for a child's ready line: a cold
	// exec of the binary plus loading Caddy takes well under a second.
	edgeStartTimeout = 30 * time.Second
	// edgeStopTimeout is how long a child may take to stop Caddy after
	// its stdin closed before it is killed.
	edgeStopTimeout = 5 * time.Second
)

// ServeEdgeIfChild returns at once unless this process was started by
// StartEdges. Then it is an edge: it reads one JSON Caddy configuration
// from stdin, loads it with caddy.Load, writes a ready line to stdout,
// and serves until stdin closes (the parent stopped it, or died) or it
// gets SIGTERM or SIGINT; then it stops Caddy and exits the process.
//
// Caddy's configuration is process-wide, so N edges need N processes;
// they are the benchmark binary itself, re-executed, so that they hold
// exactly the parent's modules (prefix_cache from the same source, and
// the peer policies where the binary registers them). Every binary that
// runs more than one edge calls ServeEdgeIfChild first thing in main (or
// TestMain).
func ServeEdgeIfChild() {
	if os.Getenv(EdgeEnv) == "" {
		return
	}
	os.Exit(serveEdge(os.Stdin, os.Stdout, os.Stderr))
}

// serveEdge is the edge's life; it returns the exit code.
func serveEdge(in io.Reader, out, errOut io.Writer) int {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	dec := json.NewDecoder(in)
	var cfg json.RawMessage
	if err := dec.Decode(&cfg); err != nil {
		fmt.Fprintf(errOut, "reading the Caddy config from stdin: %v\n", err)
		return 1
	}
	if err := caddy.Load(cfg, true); err != nil {
		fmt.Fprintf(errOut, "loading Caddy config: %v\n", err)
		return 1
	}
	fmt.Fprintln(out, edgeReady)
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, io.MultiReader(dec.Buffered(), in))
		close(closed)
	}()
	select {
	case <-closed:
	case <-signals:
	}
	if err := caddy.Stop(); err != nil {
		fmt.Fprintf(errOut, "stopping Caddy: %v\n", err)
		return 1
	}
	return 0
}

// Edge is a Caddy running in a child process (see StartEdges).
type Edge struct {
	// URL is the edge's base URL, e.g. "http://127.0.0.1:41234".
	URL string

	name  string
	proc  *child.Proc
	ready chan struct{}
}

// Pid returns the child's process ID.
func (e *Edge) Pid() int { return e.proc.Pid() }

// Exited returns a channel closed when the child has exited and been
// reaped.
func (e *Edge) Exited() <-chan struct{} { return e.proc.Exited() }

// StartEdges starts one child process per configuration, each a Caddy
// loading that JSON configuration (see ServeEdgeIfChild), and returns
// once every one listens at its URL (listens[i], a host:port that
// configs[i] listens on), or the first failure, with the child's stderr;
// on failure the children already started are stopped.
//
// Children are always cleaned up (see package child): Stop ends them
// (their stdin closes, and they are killed if they do not exit in time);
// ctx's end stops them too; and if this process dies, their stdin closes
// with it and, on Linux, the kernel kills them.
func StartEdges(ctx context.Context, configs [][]byte, listens []string) ([]*Edge, error) {
	if len(configs) != len(listens) {
		return nil, fmt.Errorf("%d configs for %d listen addresses", len(configs), len(listens))
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the benchmark binary to run as an edge: %w", err)
	}
	var edges []*Edge
	fail := func(err error) ([]*Edge, error) {
		StopEdges(edges)
		return nil, err
	}
	for i, cfg := range configs {
		e, err := startEdge(ctx, exe, fmt.Sprintf("edge %d", i), cfg, listens[i])
		if err != nil {
			return fail(err)
		}
		edges = append(edges, e)
	}
	// Wait for all at once: they start in parallel.
	timeout := time.NewTimer(edgeStartTimeout)
	defer timeout.Stop()
	for _, e := range edges {
		select {
		case <-e.ready:
		case <-e.proc.Exited():
			return fail(fmt.Errorf("%s exited before it was ready (%v)%s", e.name, e.proc.Err(), e.proc.OutputText()))
		case <-timeout.C:
			return fail(fmt.Errorf("%s not ready after %v%s", e.name, edgeStartTimeout, e.proc.OutputText()))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	return edges, nil
}

// startEdge starts one child without waiting for it to be ready. The
// config goes down its stdin, which then stays open for the child's
// life: its close is the child's signal to stop. Its stderr (Caddy's
// error logs, as the in-process Caddy writes them) goes to ours, a prefix
// on each line.
func startEdge(ctx context.Context, exe, name string, cfg []byte, listen string) (*Edge, error) {
	e := &Edge{URL: "http://" + listen, name: name, ready: make(chan struct{})}
	p, err := child.Start(ctx, child.Spec{
		Name:        name,
		Path:        exe,
		Args:        edgeArgs(),
		Env:         []string{EdgeEnv + "=1"},
		Stdin:       append(bytes.TrimSpace(cfg), '\n'),
		Stdout:      &readyWriter{ready: e.ready},
		Stderr:      &child.PrefixWriter{W: os.Stderr, Prefix: name + ": "},
		StopTimeout: edgeStopTimeout,
	})
	if err != nil {
		return nil, err
	}
	e.proc = p
	return e, nil
}

// edgeArgs are the child's arguments. A test binary that forgot to call
// ServeEdgeIfChild in TestMain then runs no test, rather than every test
// again, and exits before it is ready: an error, not a fork bomb.
func edgeArgs() []string {
	if flag.Lookup("test.run") != nil {
		return []string{"-test.run=^$"}
	}
	return nil
}

// Stop ends the child: it closes its stdin, which makes it stop Caddy and
// exit, and kills it if it has not exited within edgeStopTimeout. It
// returns an error, with the child's stderr, if the child exited on its
// own before Stop (it crashed mid-run) or did not exit cleanly. Stop is
// idempotent and safe for concurrent use.
func (e *Edge) Stop() error { return e.proc.Stop() }

// StopEdges stops every edge, in parallel, and joins their errors.
func StopEdges(edges []*Edge) error {
	procs := make([]*child.Proc, len(edges))
	for i, e := range edges {
		procs[i] = e.proc
	}
	return child.StopAll(procs)
}

// readyWriter is a child's stdout: it closes ready at the ready line and
// discards everything.
type readyWriter struct {
	ready chan struct{}
	buf   []byte
	done  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if w.done {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if string(bytes.TrimSpace(w.buf[:i])) == edgeReady {
			w.done, w.buf = true, nil
			close(w.ready)
			return len(p), nil
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<10 {
		w.buf = w.buf[len(w.buf)-len(edgeReady):]
	}
	return len(p), nil
}

// ReservePorts returns n distinct loopback host:port addresses that were
// free a moment ago (child.ReservePorts).
func ReservePorts(n int) ([]string, error) { return child.ReservePorts(n) }
