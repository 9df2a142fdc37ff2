package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
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
	// edgeStderrKept bounds the bytes of a child's stderr kept for error
	// messages.
	edgeStderrKept = 16 << 10
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

	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  *tailBuffer
	ready   chan struct{}
	exited  chan struct{} // closed when Wait returned; waitErr is set then
	waitErr error

	mu       sync.Mutex
	unwatch  func() bool // ends the watch of the start context
	stopOnce sync.Once
	stopErr  error
}

// Pid returns the child's process ID.
func (e *Edge) Pid() int { return e.cmd.Process.Pid }

// Exited returns a channel closed when the child has exited and been
// reaped.
func (e *Edge) Exited() <-chan struct{} { return e.exited }

// StartEdges starts one child process per configuration, each a Caddy
// loading that JSON configuration (see ServeEdgeIfChild), and returns
// once every one listens at its URL (listens[i], a host:port that
// configs[i] listens on), or the first failure, with the child's stderr;
// on failure the children already started are stopped.
//
// Children are always cleaned up: Stop ends them (their stdin closes,
// and they are killed if they do not exit in time); ctx's end stops them
// too; and if this process dies, their stdin closes with it and, on
// Linux, the kernel kills them (Pdeathsig).
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
		case <-e.exited:
			return fail(fmt.Errorf("%s exited before it was ready (%v)%s", e.name, e.waitErr, e.stderrText()))
		case <-timeout.C:
			return fail(fmt.Errorf("%s not ready after %v%s", e.name, edgeStartTimeout, e.stderrText()))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	return edges, nil
}

// startEdge starts one child without waiting for it to be ready.
func startEdge(ctx context.Context, exe, name string, cfg []byte, listen string) (*Edge, error) {
	e := &Edge{
		URL:    "http://" + listen,
		name:   name,
		stderr: &tailBuffer{max: edgeStderrKept},
		ready:  make(chan struct{}),
		exited: make(chan struct{}),
	}
	e.cmd = exec.Command(exe, edgeArgs()...)
	e.cmd.Env = append(os.Environ(), EdgeEnv+"=1")
	e.cmd.Stdout = &readyWriter{ready: e.ready}
	// Its stderr (Caddy's error logs, as the in-process Caddy writes
	// them) goes to ours, a prefix on each line, and its tail is kept for
	// error messages.
	e.cmd.Stderr = io.MultiWriter(e.stderr, &prefixWriter{w: os.Stderr, prefix: name + ": "})
	e.cmd.SysProcAttr = childProcAttr()
	stdin, err := e.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	e.stdin = stdin
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		e.waitErr = e.cmd.Wait()
		close(e.exited)
	}()
	// The config goes down the pipe, which then stays open for the
	// child's life: its close is the child's signal to stop.
	if _, err := stdin.Write(append(bytes.TrimSpace(cfg), '\n')); err != nil {
		e.Stop()
		return nil, fmt.Errorf("sending the config to %s: %w%s", name, err, e.stderrText())
	}
	unwatch := context.AfterFunc(ctx, func() { e.Stop() })
	e.mu.Lock()
	e.unwatch = unwatch
	e.mu.Unlock()
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
func (e *Edge) Stop() error {
	e.stopOnce.Do(func() {
		e.mu.Lock()
		if e.unwatch != nil {
			e.unwatch()
		}
		e.mu.Unlock()
		select {
		case <-e.exited:
			e.stopErr = fmt.Errorf("%s exited during the run (%v)%s", e.name, e.waitErr, e.stderrText())
			return
		default:
		}
		e.stdin.Close()
		timer := time.NewTimer(edgeStopTimeout)
		defer timer.Stop()
		select {
		case <-e.exited:
		case <-timer.C:
			e.cmd.Process.Kill()
			<-e.exited
			e.stopErr = fmt.Errorf("%s did not stop within %v and was killed%s", e.name, edgeStopTimeout, e.stderrText())
			return
		}
		if e.waitErr != nil {
			e.stopErr = fmt.Errorf("%s: %v%s", e.name, e.waitErr, e.stderrText())
		}
	})
	return e.stopErr
}

// StopEdges stops every edge, in parallel, and joins their errors.
func StopEdges(edges []*Edge) error {
	errs := make([]error, len(edges))
	var wg sync.WaitGroup
	for i, e := range edges {
		wg.Go(func() { errs[i] = e.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stderrText returns the child's stderr for an error message, or "".
func (e *Edge) stderrText() string {
	s := bytes.TrimSpace(e.stderr.Bytes())
	if len(s) == 0 {
		return ""
	}
	return "; stderr:\n" + string(s)
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

// prefixWriter writes each complete line written to it to w, after
// prefix; a last line without a newline is dropped.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.w.Write(append([]byte(p.prefix), p.buf[:i+1]...))
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

// tailBuffer keeps the last max bytes written to it; safe for concurrent
// use.
type tailBuffer struct {
	max int

	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

// Bytes returns a copy of what the buffer holds.
func (b *tailBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf)
}

// ReservePorts returns n distinct loopback host:port addresses that were
// free a moment ago: all n listeners are held open together, so no two
// are the same.
func ReservePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	addrs := make([]string, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	return addrs, nil
}
