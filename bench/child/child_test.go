package child

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// modeEnv makes the test binary a child of the tests below: it acts as
// the mode says and exits.
const modeEnv = "CHILD_TEST_MODE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(modeEnv); mode != "" {
		os.Exit(act(mode))
	}
	os.Exit(m.Run())
}

// act is a child's life. listen:ADDR listens on ADDR until SIGTERM;
// stdin echoes its stdin to stdout until it closes; ignore ignores
// SIGTERM and waits to be killed; fail writes to stderr and exits 3.
func act(mode string) int {
	switch {
	case strings.HasPrefix(mode, "listen:"):
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		ln, err := net.Listen("tcp", strings.TrimPrefix(mode, "listen:"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer ln.Close()
		<-term
		return 0
	case mode == "stdin":
		io.Copy(os.Stdout, os.Stdin)
		return 0
	case mode == "ignore":
		signal.Ignore(syscall.SIGTERM)
		select {}
	case mode == "fail":
		fmt.Fprintln(os.Stderr, "the child's own complaint")
		return 3
	}
	return 2
}

func spec(name, mode string) Spec {
	return Spec{
		Name:       name,
		Path:       os.Args[0],
		Args:       []string{"-test.run=^$"},
		Env:        []string{modeEnv + "=" + mode},
		StopSignal: syscall.SIGTERM,
	}
}

// A child that listens is waited for, answers, and stops on its signal.
func TestStartWaitStop(t *testing.T) {
	addrs, err := ReservePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	if addrs[0] == addrs[1] {
		t.Fatalf("ReservePorts(2) = %v, want two distinct addresses", addrs)
	}
	p, err := Start(context.Background(), spec("listener", "listen:"+addrs[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitListening(p, 30*time.Second, addrs[0]); err != nil {
		t.Fatalf("WaitListening(%s) = %v", addrs[0], err)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop() = %v, want nil", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("child still running after Stop")
	}
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop() = %v, want nil", err)
	}
}

// The stdin a Spec gives reaches the child, and its close stops it.
func TestStdin(t *testing.T) {
	var out bytes.Buffer
	s := spec("echo", "stdin")
	s.Stdin, s.Stdout, s.StopSignal = []byte("config\n"), &out, nil
	p, err := Start(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop() = %v, want nil", err)
	}
	if got := out.String(); got != "config\n" {
		t.Errorf("child's stdout = %q, want %q", got, "config\n")
	}
}

// A child that does not stop on its signal is killed after its timeout,
// and Stop says so.
func TestStopKillsAfterTimeout(t *testing.T) {
	s := spec("stubborn", "ignore")
	s.StopTimeout = 100 * time.Millisecond
	p, err := Start(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	// A child that has not yet set its signal handler would die of the
	// signal: this test is about one that has, so it waits for it.
	waitForIgnored(t, p.Pid())
	err = p.Stop()
	if err == nil || !strings.Contains(err.Error(), "did not stop within") {
		t.Errorf("Stop() = %v, want \"did not stop within\"", err)
	}
}

// waitForIgnored waits until process pid ignores SIGTERM (Linux: SigIgn
// in /proc/PID/status); elsewhere it waits a moment.
func waitForIgnored(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Skipf("skipped: reads /proc to see the child ignore SIGTERM: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			var mask uint64
			if _, err := fmt.Sscanf(line, "SigIgn:\t%x", &mask); err == nil && mask&(1<<(uint(syscall.SIGTERM)-1)) != 0 {
				return
			}
		}
		time.Sleep(5 * time.Millisecond) // polling the child's state, bounded by the deadline
	}
	t.Fatal("the child did not ignore SIGTERM within 30s")
}

// A child that exits on its own fails WaitListening and Stop with its
// own output.
func TestCrashReported(t *testing.T) {
	addrs, err := ReservePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), spec("crasher", "fail"))
	if err != nil {
		t.Fatal(err)
	}
	err = WaitListening(p, 30*time.Second, addrs[0])
	if err == nil || !strings.Contains(err.Error(), "exited before") || !strings.Contains(err.Error(), "the child's own complaint") {
		t.Errorf("WaitListening = %v, want \"exited before\" with the child's stderr", err)
	}
	err = p.Stop()
	if err == nil || !strings.Contains(err.Error(), "exited during the run") || !strings.Contains(err.Error(), "the child's own complaint") {
		t.Errorf("Stop() = %v, want \"exited during the run\" with the child's stderr", err)
	}
}

// The end of the start context stops the child.
func TestContextStops(t *testing.T) {
	addrs, err := ReservePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, spec("listener", "listen:"+addrs[0]))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := WaitListening(p, 30*time.Second, addrs[0]); err != nil {
		cancel()
		t.Fatal(err)
	}
	cancel()
	select {
	case <-p.Exited():
	case <-time.After(DefaultStopTimeout + 10*time.Second):
		t.Fatal("child still running after its context ended")
	}
}

func TestTailBuffer(t *testing.T) {
	b := &TailBuffer{Max: 4}
	b.Write([]byte("abc"))
	b.Write([]byte("def"))
	if got := string(b.Bytes()); got != "cdef" {
		t.Errorf("TailBuffer{Max: 4} after abc, def = %q, want %q", got, "cdef")
	}
}

func TestPrefixWriter(t *testing.T) {
	var out bytes.Buffer
	w := &PrefixWriter{W: &out, Prefix: "edge 0: "}
	w.Write([]byte("one\ntw"))
	w.Write([]byte("o\nthree"))
	if got, want := out.String(), "edge 0: one\nedge 0: two\n"; got != want {
		t.Errorf("PrefixWriter wrote %q, want %q", got, want)
	}
}
