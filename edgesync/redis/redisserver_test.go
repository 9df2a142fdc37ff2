package redis

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// redisServer is a real redis-server on a free loopback port, in a temp
// dir, persisting nothing, started and stopped by the test.
type redisServer struct {
	t     testing.TB
	bin   string
	dir   string
	port  int
	extra []string // more redis-server arguments
	cmd   *exec.Cmd
	done  chan struct{}
}

// lookRedisServer finds redis-server. Without it the test is skipped,
// saying so, except in CI (CI=true), where .ci/run installs it and its
// absence fails the test rather than hide the integration tests.
func lookRedisServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err == nil {
		return bin
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("redis-server not on PATH, and CI=true: this test against a real Redis must run in CI (.ci/run installs it with apt-get install redis-server)")
	}
	t.Skip("redis-server not on PATH: skipping this test against a real Redis (the miniredis tests still ran); install it with `apt-get install redis-server` (Debian) to run it")
	return ""
}

// startRedis starts a redis-server, with extra arguments if any, and
// stops it with the test.
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	port, err := strconv.Atoi(strings.TrimPrefix(freeAddr(t), "127.0.0.1:"))
	if err != nil {
		t.Fatal(err)
	}
	s := &redisServer{t: t, bin: lookRedisServer(t), dir: t.TempDir(), port: port, extra: extra}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }
func (s *redisServer) url() string  { return redisURL(s.addr()) }

// start runs redis-server on s.port and waits for it to say it is ready.
func (s *redisServer) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "notice"}, s.extra...)...)
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting %s: %v", s.bin, err)
	}
	ready := make(chan struct{})
	var log strings.Builder
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(out)
		waiting := true
		for sc.Scan() {
			if waiting {
				log.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), "Ready to accept connections") {
					close(ready)
					waiting = false
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = s.cmd.Wait()
	}()
	select {
	case <-ready:
	case <-s.done: // log is complete: the reader is gone
		s.t.Fatalf("redis-server on port %d exited before it was ready:\n%s", s.port, log.String())
	case <-time.After(10 * time.Second):
		s.t.Fatalf("redis-server on port %d not ready within 10s", s.port)
	}
}

// stop kills redis-server (as a crash or an operator's kill would) and
// waits for it to be gone.
func (s *redisServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// pause freezes redis-server (SIGSTOP): connections stay open and take
// bytes, nothing answers, as with a hung or partitioned server.
func (s *redisServer) pause() { s.signal(syscall.SIGSTOP) }

// resume undoes pause.
func (s *redisServer) resume() { s.signal(syscall.SIGCONT) }

func (s *redisServer) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v to redis-server: %v", sig, err)
	}
}
