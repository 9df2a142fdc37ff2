package driver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// respondConfig is a Caddy JSON config answering "edge" on the listen
// address filled in for %s, in a test's own format.
const respondConfig = `{"admin":{"disabled":true,"config":{"persist":false}},` +
	`"logging":{"logs":{"default":{"level":"ERROR"}}},` +
	`"apps":{"http":{"servers":{"s":{"listen":["%s"],"automatic_https":{"disable":true},` +
	`"routes":[{"handle":[{"handler":"static_response","body":"edge"}]}]}}}}}`

func respondConfigs(t *testing.T, n int) ([][]byte, []string) {
	t.Helper()
	listens, err := ReservePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	configs := make([][]byte, n)
	for i, a := range listens {
		configs[i] = []byte(fmt.Sprintf(respondConfig, a))
	}
	return configs, listens
}

// TestStartEdges starts three edges as child processes, checks that each
// answers on its own address, stops them and checks that they are gone.
func TestStartEdges(t *testing.T) {
	configs, listens := respondConfigs(t, 3)
	edges, err := StartEdges(context.Background(), configs, listens)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { StopEdges(edges) })
	for i, e := range edges {
		if e.URL != "http://"+listens[i] {
			t.Errorf("edge %d URL = %s, want http://%s", i, e.URL, listens[i])
		}
		if body := get(t, e.URL); body != "edge" {
			t.Errorf("GET %s = %q, want \"edge\"", e.URL, body)
		}
	}
	if err := StopEdges(edges); err != nil {
		t.Errorf("StopEdges = %v", err)
	}
	for _, e := range edges {
		select {
		case <-e.Exited():
		default:
			t.Errorf("edge %s (pid %d) still running after Stop", e.name, e.Pid())
		}
	}
	assertNoChildren(t)
}

// A child that cannot load its config fails StartEdges with the child's
// own error text, and the edges already started are stopped.
func TestStartEdgesSurfacesStderr(t *testing.T) {
	configs, listens := respondConfigs(t, 2)
	configs[1] = []byte(`{"apps":{"http":{"servers":{"s":{"listen":["` + listens[1] + `"],"routes":[{"handle":[{"handler":"no_such_handler"}]}]}}}}}`)
	edges, err := StartEdges(context.Background(), configs, listens)
	if err == nil {
		StopEdges(edges)
		t.Fatal("StartEdges with an unknown handler: no error")
	}
	if !strings.Contains(err.Error(), "edge 1 exited before it was ready") || !strings.Contains(err.Error(), "no_such_handler") {
		t.Errorf("StartEdges error = %v, want edge 1's stderr naming no_such_handler", err)
	}
	assertNoChildren(t)
}

// An edge that dies during a run makes Stop report it, with its exit.
func TestEdgeCrashReported(t *testing.T) {
	configs, listens := respondConfigs(t, 1)
	edges, err := StartEdges(context.Background(), configs, listens)
	if err != nil {
		t.Fatal(err)
	}
	crash, err := os.FindProcess(edges[0].Pid())
	if err != nil {
		t.Fatal(err)
	}
	crash.Kill()
	<-edges[0].Exited()
	if err := StopEdges(edges); err == nil || !strings.Contains(err.Error(), "exited during the run") {
		t.Errorf("StopEdges after a crash = %v, want \"exited during the run\"", err)
	}
}

// The end of the context the edges were started with stops them.
func TestEdgesStopWithContext(t *testing.T) {
	configs, listens := respondConfigs(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	edges, err := StartEdges(ctx, configs, listens)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cancel()
	for _, e := range edges {
		select {
		case <-e.Exited():
		case <-time.After(edgeStopTimeout + 5*time.Second):
			t.Fatalf("edge (pid %d) still running after its context ended", e.Pid())
		}
	}
	assertNoChildren(t)
}

// An edge whose parent dies without stopping it goes too: its stdin
// closes, and on Linux the kernel kills it (Pdeathsig).
func TestEdgesDieWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("skipped: reads /proc to see the orphaned edge go")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), orphanEnv+"="+respondConfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the edge's parent: %v\n%s", err, stderr.Bytes())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the edge's parent printed %q, want a pid", out)
	}
	deadline := time.Now().Add(edgeStopTimeout + 5*time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			syscallKill(pid)
			t.Fatalf("edge (pid %d) still running after its parent exited", pid)
		}
		time.Sleep(10 * time.Millisecond) // polling the condition, with the deadline above
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// assertNoChildren fails if this process has a child process, running or
// not reaped: every edge and redis-server must be gone after a run.
func assertNoChildren(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("child processes left: %s", strings.Join(kids, "; "))
	}
}

// children lists this process's children from /proc.
func children(t *testing.T) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	me := os.Getpid()
	var kids []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == me {
			kids = append(kids, fmt.Sprintf("%s state %s", string(b[:i+1]), f[0]))
		}
	}
	return kids
}

// processAlive reports whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func syscallKill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}
