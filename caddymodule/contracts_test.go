package caddymodule_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// Caddy's own contracts, each through a real Caddy: streamed uploads stay
// streamed, no config value crashes the process, option changes take
// effect on reload, request variables never print a prompt, and what
// buffering costs a client (Expect: 100-continue, lb_try_duration) is what
// the README says.

// An upload marked Incremental: ?1 is proxied as it arrives: the upstream
// is contacted, and answers, while the client is still sending, as with a
// stock policy. (The policy once read it whole before choosing an
// upstream.)
func TestIncrementalUploadIsStreamed(t *testing.T) {
	answered := make(chan struct{})
	streaming := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(answered)
		io.Copy(io.Discard, r.Body)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go streaming.Serve(ln)
	t.Cleanup(func() { streaming.Close() })

	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy prefix_cache
		flush_interval -1
	}
}
`, port, ln.Addr()))
	before := scrape(t, admin, "caddy_prefix_cache_body_peeks_total")

	// A raw client, so that the first chunk leaves at once (Go's client
	// buffers a streamed body).
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	first := `{"model":"m","messages":[{"role":"user","content":"`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nIncremental: ?1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(first), first)
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream was not contacted while the client was still sending an incremental upload")
	}
	last := `hello"}]}`
	fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(last), last)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	after := scrape(t, admin, "caddy_prefix_cache_body_peeks_total")
	key := `caddy_prefix_cache_body_peeks_total{outcome="incremental"}`
	if after[key]-before[key] != 1 {
		t.Errorf("%s rose by %v, want 1", key, after[key]-before[key])
	}
}

// A duration or size that cannot work is refused when the config loads,
// in the Caddyfile and in JSON, and a running server refuses it on /load
// and keeps serving. (forget_after 1ns once panicked the janitor's ticker
// in a goroutine and took the process down.)
func TestInvalidValuesRefusedAtLoad(t *testing.T) {
	for _, opt := range []string{"forget_after 1ns", "forget_after 99ms", "forget_after 200000h", "max_body 0", "body_budget 2TiB", "tenant_share 1.5", "allow_empty_tenant",
		"engine_metrics {\n\t\t\t\tinterval 1s\n\t\t\t\ttimeout 2s\n\t\t\t}", "engine_metrics {\n\t\t\t\tinterval 1ms\n\t\t\t}",
		"engine_metrics http://elsewhere.example/metrics", "sync_load_interval 1ms", "sync_load_interval 1m", "engine_metrics {\n\t\t\t\tport 70000\n\t\t\t}",
		"prefill_rate off\n\t\t\tengine_metrics {\n\t\t\t\tprefill on\n\t\t\t}", "engine_metrics {\n\t\t\t\tprefill maybe\n\t\t\t}"} {
		cfg := fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy 127.0.0.1:1 {\n\t\tlb_policy prefix_cache {\n\t\t\t%s\n\t\t}\n\t}\n}\n", freePort(t), opt)
		cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), map[string]any{"filename": "Caddyfile"})
		if err == nil {
			// Not a Caddyfile error: the policy's Validate must catch it.
			var c caddy.Config
			if err := json.Unmarshal(cfgJSON, &c); err != nil {
				t.Fatal(err)
			}
			err = caddy.Validate(&c)
		}
		if err == nil {
			t.Errorf("%q: config accepted, want an error", opt)
		} else {
			t.Logf("%q: %v", opt, err)
		}
	}

	bs := newBackends(t, 1)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", ""))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	for _, bad := range []string{`"forget_after": 1`, `"forget_after": -5`, `"forget_after": "200000h"`, `"body_budget": -1`, `"max_body": -1`,
		`"engine_metrics": {"interval": 1}`, `"engine_metrics": {"timeout": -1}`, `"engine_metrics": {"uri": "metrics"}`, `"engine_metrics": {"bytes_per_token": 100}`} {
		cfg := fmt.Sprintf(`{"admin":{"listen":%q},"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:%d"],"routes":[{"handle":[{"handler":"reverse_proxy","upstreams":[{"dial":%q}],"load_balancing":{"selection_policy":{"policy":"prefix_cache",%s}}}]}]}}}}}`,
			strings.TrimPrefix(admin, "http://"), freePort(t), bs[0].addr(), bad)
		// A load restarts the admin server, failed or not, and shuts the
		// old one down after answering (caddy's replaceLocalAdminServer):
		// a POST on the old one's idle connection, or on a new one it
		// accepted before it stopped, fails with EOF, and the client
		// does not retry a POST. Every load here is refused, so sending
		// it again on a new connection changes nothing.
		resp, err := http.Post(admin+"/load", "application/json", strings.NewReader(cfg))
		for try := 1; err != nil && try < 3; try++ {
			t.Logf("POST /load with %s: %v; again on a new connection", bad, err)
			http.DefaultClient.CloseIdleConnections()
			resp, err = http.Post(admin+"/load", "application/json", strings.NewReader(cfg))
		}
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		http.DefaultClient.CloseIdleConnections()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("POST /load with %s: 200, want an error", bad)
		}
		t.Logf("POST /load with %s: %d %s", bad, resp.StatusCode, bytes.TrimSpace(msg))
		post(t, http.DefaultClient, url, chat("still serving", bad)) // fails the test unless 200
	}
}

// A reload that changes forget_after takes effect at once: an upstream
// gone from every pool is forgotten after the new config's forget_after,
// not the old one's.
func TestForgetAfterChangesOnReload(t *testing.T) {
	bs := newBackends(t, 3)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", "forget_after 1h"))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	for c := range 12 {
		post(t, http.DefaultClient, url, chat("sys", words(fmt.Sprintf("reload-forget%d", c), 200)))
	}
	if got := getStats(t, admin).Instances[0].Indexed; len(got) != 3 {
		t.Fatalf("indexed upstreams = %v, want all 3", got)
	}
	reload(t, admin, proxySite(port, bs[:2], "", "forget_after 200ms"))
	gone := bs[2].addr()
	start := time.Now()
	for {
		if _, ok := getStats(t, admin).Instances[0].Indexed[gone]; !ok {
			t.Logf("forgotten %v after the reload", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s still indexed 10s after a reload to forget_after 200ms", gone)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

// One site that has never routed a request no longer keeps the janitor
// from forgetting, for the sites it shares an index with, an upstream
// that left every pool.
func TestIdleSiteDoesNotBlockForgetting(t *testing.T) {
	bs := newBackends(t, 3)
	busy, idle := freePort(t), freePort(t)
	opts := "forget_after 200ms"
	sites := func(busyUps []*backend) string {
		return proxySite(busy, busyUps, "", opts) + proxySite(idle, bs[:1], "", opts)
	}
	admin := startCaddyAdmin(t, sites(bs))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", busy)
	for c := range 12 {
		post(t, http.DefaultClient, url, chat("sys", words(fmt.Sprintf("idle%d", c), 200)))
	}
	reload(t, admin, sites(bs[:2]))
	gone := bs[2].addr()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := getStats(t, admin)
		if _, ok := st.Instances[0].Indexed[gone]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still indexed 10s after it left every pool, with an idle site sharing the index", gone)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

// Pools chosen per request (an upstream source that answers each request
// with its own set) all count as present: an upstream in one of them is
// not forgotten while requests keep using it, and is forgotten once they
// stop.
func TestPerRequestPoolsAllCount(t *testing.T) {
	bs := newBackends(t, 4)
	pools.Lock()
	pools.byName = map[string][]string{"a": {bs[0].addr(), bs[1].addr()}, "b": {bs[2].addr(), bs[3].addr()}}
	pools.Unlock()
	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy {
		dynamic test_pool_by_header
		lb_policy prefix_cache {
			forget_after 200ms
		}
	}
}
`, port))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	send := func(pool string, i int) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(chat("sys", words(fmt.Sprintf("pool-%s-%d", pool, i%8), 100))))
		req.Header.Set("X-Pool", pool)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Both pools in use, for five times forget_after.
	for i, start := 0, time.Now(); time.Since(start) < time.Second; i++ {
		send("a", i)
		send("b", i)
	}
	if got := getStats(t, admin).Instances[0].Indexed; len(got) != 4 {
		t.Fatalf("indexed upstreams while both pools are in use = %v, want all 4", got)
	}
	// Pool a falls out of use: its upstreams go, pool b's stay.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		send("b", i)
		indexed := getStats(t, admin).Instances[0].Indexed
		_, a0 := indexed[bs[0].addr()]
		_, a1 := indexed[bs[1].addr()]
		if !a0 && !a1 {
			if len(indexed) != 2 {
				t.Errorf("indexed upstreams = %v, want pool b's 2", indexed)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool a's upstreams still indexed 10s after it fell out of use: %v", indexed)
		}
	}
}

// pools are test_pool_by_header's answers: the pool named by the
// request's X-Pool header.
var pools struct {
	sync.Mutex
	byName map[string][]string
}

func init() {
	caddy.RegisterModule(poolByHeader{})
}

// poolByHeader is a dynamic upstream source answering each request with
// the pool its X-Pool header names, rebuilding the Upstream values on every
// call as Caddy's own sources do.
type poolByHeader struct{}

func (poolByHeader) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.test_pool_by_header",
		New: func() caddy.Module { return new(poolByHeader) },
	}
}

func (*poolByHeader) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the module's name
	return nil
}

func (poolByHeader) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	pools.Lock()
	defer pools.Unlock()
	var ups []*reverseproxy.Upstream
	for _, d := range pools.byName[r.Header.Get("X-Pool")] {
		ups = append(ups, &reverseproxy.Upstream{Dial: d})
	}
	return ups, nil
}

// The request's variables hold the policy's record of the body; printing
// them through a placeholder prints a fixed name, never the prompt.
func TestVarsNeverPrintThePrompt(t *testing.T) {
	bs := newBackends(t, 1)
	port := freePort(t)
	startCaddy(t, proxySite(port, bs, "header_down X-Vars {http.vars.prefix_cache.request}", ""))
	canary := "canary-7f3a9c prompt text"
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json", bytes.NewReader(chat(canary, "hi")))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	got := resp.Header.Get("X-Vars")
	if got != "prefix_cache request" || strings.Contains(got, "canary") {
		t.Errorf("{http.vars.prefix_cache.request} = %q, want %q", got, "prefix_cache request")
	}
}

// Expect: 100-continue on a body the policy reads: Caddy answers 100
// Continue itself, before any upstream is contacted, and the client
// uploads its body to Caddy; the engine's own answer (here a 401 without
// reading the body) comes after the upload. This is what
// docs/limitations.md says buffering costs a client.
func TestExpectContinueAnsweredBeforeUpstream(t *testing.T) {
	var contacted atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		contacted.Store(true)
		w.WriteHeader(http.StatusUnauthorized) // rejects without reading the body
	}))
	t.Cleanup(up.Close)
	port := freePort(t)
	startCaddy(t, fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy %s {\n\t\tlb_policy prefix_cache\n\t}\n}\n", port, up.Listener.Addr()))

	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	body := chat("sys", words("expect", 100))
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(body))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusContinue {
		t.Fatalf("first response %d, want 100 Continue", resp.StatusCode)
	}
	if contacted.Load() {
		t.Fatalf("the upstream was contacted before Caddy's 100 Continue")
	}
	conn.Write(body)
	for resp.StatusCode == http.StatusContinue {
		if resp, err = http.ReadResponse(br, nil); err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !contacted.Load() {
		t.Errorf("status %d (upstream contacted %v), want the engine's 401", resp.StatusCode, contacted.Load())
	}
}

// The body's upload happens inside the policy's Select, after Caddy has
// started the lb_try_duration clock: with lb_try_duration shorter than
// the upload, a retry after a dial error finds the budget spent, so some
// requests fail that round_robin would serve. lb_retries counts attempts
// and has no clock; with it, or with request_buffers (Caddy then reads
// the body before it starts the clock), every request is served whatever
// the upload's duration.
func TestSlowUploadAndRetryBudget(t *testing.T) {
	live := newBackend(t, "live")
	dead := refusedPort(t)
	const uploads = 6
	const upload = 1500 * time.Millisecond
	for _, tt := range []struct {
		name    string
		opts    string
		wantAll bool
	}{
		{"lb_retries", "lb_retries 1", true},
		{"lb_try_duration above the upload", "lb_try_duration 10s", true},
		// Caddy reads a buffered body before its clock starts.
		{"lb_try_duration below the upload, with request_buffers", "lb_try_duration 1s\n\t\trequest_buffers 4MiB", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			port := freePort(t)
			startCaddy(t, fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy 127.0.0.1:%d %s {\n\t\tlb_policy prefix_cache\n\t\t%s\n\t}\n}\n", port, dead, live.addr(), tt.opts))
			url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
			var wg sync.WaitGroup
			var mu sync.Mutex
			served := 0
			for i := range uploads {
				wg.Go(func() {
					body := chat("sys", words(fmt.Sprintf("slow%d", i), 200))
					resp, err := http.Post(url, "application/json", &slowReader{data: body, total: upload})
					if err != nil {
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						mu.Lock()
						served++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if tt.wantAll && served != uploads {
				t.Errorf("%d of %d slow uploads served, want all", served, uploads)
			}
		})
	}
}

// slowReader sends data in ten pieces spread over total: a client on a
// slow link.
type slowReader struct {
	data  []byte
	total time.Duration
	sent  int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.sent >= len(s.data) {
		return 0, io.EOF
	}
	time.Sleep(s.total / 10) // the client's link is slow: this is the workload, not synchronisation
	n := copy(p, s.data[s.sent:min(len(s.data), s.sent+len(s.data)/10+1)])
	s.sent += n
	return n, nil
}
