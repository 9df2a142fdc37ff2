// Package child starts and stops the benchmarks' child processes, all in
// one way: a Caddy (the built binary, or a benchmark binary re-executed as
// an edge), a redis-server, the overhead command's backend.
//
// A child is always cleaned up: Stop ends it (its stdin closes, it gets
// its stop signal, and it is killed if it has not exited in time); the
// start context's end stops it too; and if the benchmark dies, on Linux
// the kernel kills it (Pdeathsig). A child runs in its own process group,
// so that a terminal's Ctrl-C reaches only the benchmark, which stops its
// children in order.
//
// The package imports no Caddy: a command that measures a Caddy binary
// from outside does not link one.
package child

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Defaults of a Spec.
const (
	// DefaultStopTimeout is how long a child may take to exit after its
	// stop signal (or its stdin's close) before it is killed.
	DefaultStopTimeout = 5 * time.Second
	// outputKept bounds the bytes of a child's output kept for error
	// messages.
	outputKept = 16 << 10
)

// Spec says how to run one child.
type Spec struct {
	// Name names the child in errors, e.g. "edge 1" or "caddy".
	Name string
	// Path and Args are the program and its arguments.
	Path string
	Args []string
	// Env is added to this process's environment.
	Env []string
	// CPU, if set, pins the child with `taskset -c CPU` (the child keeps
	// the pid taskset had: taskset execs it).
	CPU string
	// Stdin, if set, is written to the child's stdin, which then stays
	// open for the child's life: its close is a signal to stop.
	Stdin []byte
	// Stdout and Stderr, if set, receive the child's output. The last
	// 16 KiB of its stderr are kept for error messages, and of its stdout
	// too when Stdout is nil.
	Stdout, Stderr io.Writer
	// StopSignal is sent by Stop; nil sends none (a child that stops
	// when its stdin closes).
	StopSignal os.Signal
	// StopTimeout bounds Stop's wait before it kills the child. Default:
	// DefaultStopTimeout.
	StopTimeout time.Duration
}

// Proc is a started child process.
type Proc struct {
	name        string
	cmd         *exec.Cmd
	stdin       io.WriteCloser // nil without Spec.Stdin
	out         *TailBuffer
	stopSignal  os.Signal
	stopTimeout time.Duration
	exited      chan struct{} // closed when Wait returned; waitErr is set then
	waitErr     error

	mu       sync.Mutex
	unwatch  func() bool // ends the watch of the start context
	stopOnce sync.Once
	stopErr  error
}

// Start starts the child of s without waiting for it to be ready (see
// WaitListening). ctx's end stops it.
func Start(ctx context.Context, s Spec) (*Proc, error) {
	p := &Proc{
		name:        s.Name,
		out:         &TailBuffer{Max: outputKept},
		stopSignal:  s.StopSignal,
		stopTimeout: s.StopTimeout,
		exited:      make(chan struct{}),
	}
	if p.stopTimeout <= 0 {
		p.stopTimeout = DefaultStopTimeout
	}
	path, args := s.Path, s.Args
	if s.CPU != "" {
		path, args = "taskset", append([]string{"-c", s.CPU, path}, args...)
	}
	p.cmd = exec.Command(path, args...)
	if len(s.Env) > 0 {
		p.cmd.Env = append(os.Environ(), s.Env...)
	}
	p.cmd.Stdout = p.out
	if s.Stdout != nil {
		p.cmd.Stdout = s.Stdout
	}
	p.cmd.Stderr = p.out
	if s.Stderr != nil {
		p.cmd.Stderr = io.MultiWriter(p.out, s.Stderr)
	}
	p.cmd.SysProcAttr = procAttr()
	if s.Stdin != nil {
		stdin, err := p.cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		p.stdin = stdin
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", s.Name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	if p.stdin != nil {
		if _, err := p.stdin.Write(s.Stdin); err != nil {
			p.Kill()
			return nil, fmt.Errorf("writing to %s's stdin: %w%s", s.Name, err, p.OutputText())
		}
	}
	unwatch := context.AfterFunc(ctx, func() { p.Stop() })
	p.mu.Lock()
	p.unwatch = unwatch
	p.mu.Unlock()
	return p, nil
}

// Name returns the child's name.
func (p *Proc) Name() string { return p.name }

// Pid returns the child's process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Args returns the child's command line, its program first (taskset's
// when pinned).
func (p *Proc) Args() []string { return p.cmd.Args }

// Exited returns a channel closed when the child has exited and been
// reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err returns how the child exited, once Exited is closed.
func (p *Proc) Err() error {
	<-p.exited
	return p.waitErr
}

// Stop ends the child: it closes its stdin, sends its stop signal, and
// kills it if it has not exited within its stop timeout. It returns an
// error, with the child's output, if the child exited on its own before
// Stop (it crashed mid-run) or did not exit cleanly. Stop is idempotent
// and safe for concurrent use.
func (p *Proc) Stop() error {
	p.stopOnce.Do(func() {
		if p.stopErr = p.endWatch("during the run"); p.stopErr != nil {
			return
		}
		if p.stdin != nil {
			p.stdin.Close()
		}
		if p.stopSignal != nil {
			p.cmd.Process.Signal(p.stopSignal)
		}
		timer := time.NewTimer(p.stopTimeout)
		defer timer.Stop()
		select {
		case <-p.exited:
		case <-timer.C:
			p.cmd.Process.Kill()
			<-p.exited
			p.stopErr = fmt.Errorf("%s did not stop within %v and was killed%s", p.name, p.stopTimeout, p.OutputText())
			return
		}
		if p.waitErr != nil {
			p.stopErr = fmt.Errorf("%s: %v%s", p.name, p.waitErr, p.OutputText())
		}
	})
	return p.stopErr
}

// Kill kills the child with SIGKILL, as a crash would, and waits until it
// is gone. It returns an error, with the child's output, if the child had
// exited on its own. A later Stop does nothing.
func (p *Proc) Kill() error {
	var err error
	p.stopOnce.Do(func() {
		if err = p.endWatch("before it was killed"); err != nil {
			return
		}
		p.cmd.Process.Kill()
		<-p.exited
	})
	return err
}

// endWatch ends the watch of the start context. If the child has
// already exited on its own, it returns an error saying so, with the
// child's output; when words the moment ("during the run").
func (p *Proc) endWatch(when string) error {
	p.mu.Lock()
	if p.unwatch != nil {
		p.unwatch()
	}
	p.mu.Unlock()
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited %s (%v)%s", p.name, when, p.waitErr, p.OutputText())
	default:
		return nil
	}
}

// Output returns a copy of the last bytes of the child's output that
// were kept (see Spec.Stdout).
func (p *Proc) Output() []byte { return p.out.Bytes() }

// OutputText returns the child's kept output for an error message,
// after "; output:", or "" when there is none.
func (p *Proc) OutputText() string {
	s := bytes.TrimSpace(p.out.Bytes())
	if len(s) == 0 {
		return ""
	}
	return "; output:\n" + string(s)
}

// StopAll stops every child, in parallel, and joins their errors.
func StopAll(procs []*Proc) error {
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitListening waits until every address accepts a TCP connection, and
// returns an error, with the child's output, if p exits first or timeout
// passes. It polls: a child says nothing when it listens.
func WaitListening(p *Proc, timeout time.Duration, addrs ...string) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for _, addr := range addrs {
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %s not listening after %v: %w%s", p.name, addr, timeout, err, p.OutputText())
			}
			select {
			case <-p.exited:
				return fmt.Errorf("%s exited before %s listened (%v)%s", p.name, addr, p.waitErr, p.OutputText())
			case <-tick.C:
			}
		}
	}
	return nil
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

// TailBuffer keeps the last Max bytes written to it; safe for concurrent
// use.
type TailBuffer struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.Max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

// Bytes returns a copy of what the buffer holds.
func (b *TailBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf)
}

// PrefixWriter writes each complete line written to it to W, after
// Prefix; a last line without a newline is dropped. Not safe for
// concurrent use (one child's stream).
type PrefixWriter struct {
	W      io.Writer
	Prefix string
	buf    []byte
}

func (p *PrefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.W.Write(append([]byte(p.Prefix), p.buf[:i+1]...))
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}
