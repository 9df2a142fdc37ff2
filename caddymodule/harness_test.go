package caddymodule_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/prefixcache/caddy-prefixcache/caddymodule"
	_ "github.com/prefixcache/caddy-prefixcache/edgesync/redis"
)

// backend is a real HTTP upstream that records what it receives.
type backend struct {
	name string
	srv  *httptest.Server

	mu       sync.Mutex
	received []received

	// handle, when set, answers instead of the default JSON reply.
	handle func(w http.ResponseWriter, r *http.Request, body []byte) bool
}

type received struct {
	path          string
	digest        string
	size          int
	contentLength int64
	chunked       bool
}

func newBackend(t *testing.T, name string) *backend {
	t.Helper()
	return newBackendOn(t, name, nil)
}

// newBackendOn is newBackend on a listener of the test's (nil: any
// loopback port).
func newBackendOn(t *testing.T, name string, ln net.Listener) *backend {
	t.Helper()
	b := &backend{name: name}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.received = append(b.received, received{
			path:          r.URL.Path,
			digest:        digest(body),
			size:          len(body),
			contentLength: r.ContentLength,
			chunked:       len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked",
		})
		handle := b.handle
		b.mu.Unlock()
		if handle != nil && handle(w, r, body) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", b.name)
		fmt.Fprintf(w, `{"backend":%q,"bytes":%d}`, b.name, len(body))
	}))
	if ln != nil {
		b.srv.Listener.Close()
		b.srv.Listener = ln
	}
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) addr() string { return b.srv.Listener.Addr().String() }

func (b *backend) requests() []received {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]received(nil), b.received...)
}

func (b *backend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.received)
}

// refusedPort returns a loopback port where a dial is refused for the
// whole test: it holds a socket bound there that never listens. A port
// from freePort is only free a moment; go test runs other packages' tests
// beside this one, and one of their listeners may take it, so that a
// "dead" upstream answers.
func refusedPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	handedOut.Store(port, true)
	return port
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// handedOut holds the ports freePort returned, so that it never returns
// one twice: the kernel may offer a just-closed port again at once, and a
// site port equal to the https_port fails the config.
var handedOut sync.Map

// freePort returns a loopback port that was free a moment ago and that
// no earlier call returned.
func freePort(t *testing.T) int {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if _, seen := handedOut.LoadOrStore(port, true); !seen {
			return port
		}
	}
}

// startCaddy adapts a Caddyfile and runs it in this process until the test
// ends. The Caddyfile's global options block is written here: no admin
// endpoint, storage in the test's temp dir, no trust-store installs.
func startCaddy(t *testing.T, sites string) (storage string) {
	t.Helper()
	return startCaddyWith(t, "admin off", sites)
}

// startCaddyAdmin is startCaddy with the admin endpoint on a loopback port,
// which it returns as a base URL.
func startCaddyAdmin(t *testing.T, sites string) (admin string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startCaddyWith(t, "admin "+addr, sites)
	return "http://" + addr
}

// caddyfileJSON adapts a whole Caddyfile.
func caddyfileJSON(t *testing.T, cfgFile string) []byte {
	t.Helper()
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfgFile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting Caddyfile: %v\n%s", err, cfgFile)
	}
	for _, w := range warnings {
		if !strings.Contains(w.Message, "not formatted") {
			t.Logf("Caddyfile warning: %s", w.String())
		}
	}
	return cfgJSON
}

// globalOptions is the global options block of the tests' Caddyfiles.
func globalOptions(t *testing.T, admin, storage string) string {
	return fmt.Sprintf(`{
	%s
	persist_config off
	skip_install_trust
	log default {
		output discard
	}
	storage file_system %s
	http_port %d
	https_port %d
	servers {
		protocols h1 h2
	}
}
`, admin, storage, freePort(t), freePort(t))
}

func startCaddyWith(t *testing.T, admin, sites string) (storage string) {
	t.Helper()
	storage = t.TempDir()
	cfgJSON := caddyfileJSON(t, globalOptions(t, admin, storage)+sites)
	if err := caddy.Load(cfgJSON, true); err != nil {
		t.Fatalf("loading config: %v\n%s", err, cfgJSON)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping Caddy: %v", err)
		}
	})
	return storage
}

// chat builds an OpenAI chat completions body from alternating user and
// assistant turns after a system prompt.
func chat(system string, turns ...string) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []msg{{Role: "system", Content: system}}
	for i, t := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{Role: role, Content: t})
	}
	body, err := json.Marshal(map[string]any{
		"model":       "test-model",
		"messages":    msgs,
		"temperature": 0.7,
		"max_tokens":  32,
	})
	if err != nil {
		panic(err)
	}
	return body
}

// words returns n deterministic words of text distinct per seed.
func words(seed string, n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "%s-%d ", seed, i)
	}
	return sb.String()
}

// post sends body to url and returns the response body and the backend
// that answered.
func post(t *testing.T, client *http.Client, url string, body []byte) (string, []byte) {
	t.Helper()
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", url, resp.StatusCode, out)
	}
	return resp.Header.Get("X-Backend"), out
}

// A refusedPort refuses dials and cannot be taken by a listener while the
// test runs.
func TestRefusedPort(t *testing.T) {
	port := refusedPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded, want refused", addr)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("listen on %s succeeded, want the port held", addr)
	}
}
