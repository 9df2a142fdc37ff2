package driver

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// requireRedis skips the test when redis-server is not installed, saying
// what was skipped, except in CI (CI=true), which installs it: there the
// test fails instead.
func requireRedis(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: CI must install it to run %s", RedisNotFound, t.Name())
	}
	t.Skipf("skipped %s: %s", t.Name(), RedisNotFound)
}

// startTestRedis starts a redis-server for the test, stopped when it
// ends; it skips the test (fails it in CI) without redis-server.
func startTestRedis(t *testing.T) *Redis {
	t.Helper()
	requireRedis(t)
	r, err := StartRedis(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	return r
}

// TestRedisLifecycle starts a real redis-server, kills it with SIGKILL,
// restarts it on the same port and stops it, checking with a RESP PING
// at each step, and that nothing outlives Stop.
func TestRedisLifecycle(t *testing.T) {
	ctx := context.Background()
	r := startTestRedis(t)
	if !strings.HasPrefix(r.URL(), "redis://127.0.0.1:") {
		t.Errorf("URL() = %s, want redis://127.0.0.1:PORT", r.URL())
	}
	if err := Ping(ctx, r.Addr); err != nil {
		t.Fatalf("PING after start: %v", err)
	}
	dir, pid := r.dir, r.Pid()
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("working directory: %v", err)
	}

	if err := r.Kill(); err != nil {
		t.Fatalf("Kill() = %v", err)
	}
	if r.Running() || processAlive(pid) {
		t.Errorf("redis-server (pid %d) still running after Kill", pid)
	}
	if err := Ping(ctx, r.Addr); err == nil {
		t.Errorf("PING answered after Kill")
	}
	if err := r.Restart(ctx); err != nil {
		t.Fatalf("Restart() = %v", err)
	}
	if err := Ping(ctx, r.Addr); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
	if r.Pid() == pid {
		t.Errorf("Restart kept pid %d", pid)
	}
	if err := r.Restart(ctx); err == nil {
		t.Errorf("Restart() of a running server: no error")
	}

	pid = r.Pid()
	if err := r.Stop(); err != nil {
		t.Errorf("Stop() = %v", err)
	}
	if processAlive(pid) {
		t.Errorf("redis-server (pid %d) still running after Stop", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("working directory %s left after Stop (%v)", dir, err)
	}
	if err := r.Stop(); err != nil {
		t.Errorf("second Stop() = %v", err)
	}
	assertNoChildren(t)
}

// No persistence: a server killed and restarted comes back empty, and
// writes no dump or append-only file.
func TestRedisNoPersistence(t *testing.T) {
	requireRedis(t)
	ctx := context.Background()
	r, err := StartRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	for _, arg := range []string{"--save", "--appendonly"} {
		if !strings.Contains(strings.Join(r.proc.Args(), " "), arg) {
			t.Errorf("redis-server args %v lack %s", r.proc.Args(), arg)
		}
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("redis-server wrote %s in its directory", e.Name())
	}
}

// Ping wants +PONG: a closed port, or a server answering something else,
// is an error.
func TestPing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			bufio.NewReader(c).ReadString('\n')
			c.Write([]byte("-NOAUTH Authentication required.\r\n"))
			c.Close()
		}
	}()
	if err := Ping(context.Background(), ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("Ping(a server answering -NOAUTH) = %v, want an error quoting it", err)
	}
	closed, err := ReservePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := Ping(context.Background(), closed[0]); err == nil {
		t.Errorf("Ping(a closed port): no error")
	}
}

// WaitSubscribers counts the connections subscribed to a channel, and
// gives up, saying how many there were, when too few subscribe in time.
func TestRedisWaitSubscribers(t *testing.T) {
	ctx := context.Background()
	r := startTestRedis(t)
	if n, err := Subscribers(ctx, r.Addr, "edges"); err != nil || n != 0 {
		t.Fatalf("Subscribers before any = %d, %v; want 0", n, err)
	}
	for range 2 {
		conn, err := net.Dial("tcp", r.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := conn.Write([]byte("*2\r\n$9\r\nSUBSCRIBE\r\n$5\r\nedges\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.WaitSubscribers(ctx, "edges", 2, 10*time.Second); err != nil {
		t.Fatalf("WaitSubscribers(2) = %v", err)
	}
	if n, err := Subscribers(ctx, r.Addr, "edges"); err != nil || n != 2 {
		t.Errorf("Subscribers = %d, %v; want 2", n, err)
	}
	err := r.WaitSubscribers(ctx, "edges", 3, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "2 of 3") {
		t.Errorf("WaitSubscribers(3) = %v, want an error naming 2 of 3", err)
	}
}

// Stats counts what the server received: PUBLISH commands and at least
// their payloads' bytes.
func TestRedisStats(t *testing.T) {
	ctx := context.Background()
	r := startTestRedis(t)
	before, err := r.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := strings.Repeat("x", 1000)
	br := bufio.NewReader(conn)
	for range 3 {
		if _, err := fmt.Fprintf(conn, "*3\r\n$7\r\nPUBLISH\r\n$5\r\nedges\r\n$%d\r\n%s\r\n", len(payload), payload); err != nil {
			t.Fatal(err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != ":0\r\n" {
			t.Fatalf("PUBLISH answered %q, %v", line, err)
		}
	}
	after, err := r.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Publishes - before.Publishes; got != 3 {
		t.Errorf("publishes counted %d, want 3", got)
	}
	if got := after.InputBytes - before.InputBytes; got < 3*int64(len(payload)) || got > 3*int64(len(payload)+64)+128 {
		t.Errorf("input bytes grew by %d, want about 3 x %d", got, len(payload))
	}
}
