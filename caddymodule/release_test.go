package caddymodule_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/caddymodule"
)

// When the policy gives a request's body buffer back, through a real
// Caddy, in each case reuse.go works out from Caddy's source: while the
// response streams when no retry can ask for the body again; only when the
// request ends when lb_retry_match may; with the whole body again for a
// retry after a retryable status; and within body_budget always.

// waitHeld waits until the body buffers and chunk hashes of the process
// hold want bytes, or fails after a deadline.
func waitHeld(t *testing.T, want int64, why string) {
	t.Helper()
	waitFor(t, caddymodule.BodyHeld, want, why)
}

// waitBuffers waits until the body buffers alone hold want bytes.
func waitBuffers(t *testing.T, want int64, why string) {
	t.Helper()
	waitFor(t, caddymodule.BodyBuffersHeld, want, why)
}

// waitFor waits until held() returns want bytes, or fails after a
// deadline.
func waitFor(t *testing.T, held func() int64, want int64, why string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for held() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d bytes held, want %d", why, held(), want)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

// streamingBackend reads the whole body, sends the response headers and a
// first event, then holds the stream open until release is closed.
func streamingBackend(t *testing.T, release <-chan struct{}) net.Addr {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "data: [DONE]\n\n")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr()
}

// A streamed response: with no lb_retry_match, the buffer goes back once
// the engine has read the prompt, while the tokens still stream; with
// lb_retry_match (Caddy may retry after the response headers), it is kept
// until the request ends.
func TestBodyReleasedWhileResponseStreams(t *testing.T) {
	for _, tt := range []struct {
		name       string
		opts       string
		keptDuring bool
	}{
		{"no retry after a read", "lb_retries 2", false},
		{"lb_retry_match", "lb_retries 2\n\t\tlb_retry_match {\n\t\t\texpression `{http.reverse_proxy.status_code} == 502`\n\t\t}", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			waitHeld(t, 0, "before the test")
			release := make(chan struct{})
			up := streamingBackend(t, release)
			port := freePort(t)
			startCaddy(t, fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy %s {\n\t\tlb_policy prefix_cache\n\t\tflush_interval -1\n\t\t%s\n\t}\n}\n", port, up, tt.opts))
			body := chat("sys", words("stream-release", 20000)) // ~300 KB
			resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			first, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || !strings.HasPrefix(first, "data:") {
				t.Fatalf("first event %q, %v", first, err)
			}
			if tt.keptDuring {
				if held := caddymodule.BodyBuffersHeld(); held < int64(len(body)) {
					t.Errorf("while the response streams, with lb_retry_match: %d bytes held, want the body's %d kept for a retry", held, len(body))
				}
			} else {
				waitBuffers(t, 0, "while the response streams")
			}
			close(release)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			waitHeld(t, 0, "after the response ended")
		})
	}
}

// A retry after a response matched lb_retry_match, when the first engine
// had read the whole body, sends the next engine the client's exact bytes,
// for declared and chunked bodies. (Caddy's own wrapper has closed the
// client's body by then: without the policy's copy, stock Caddy sends a
// broken body unless request_buffers holds it.)
func TestRetryOnStatusSendsTheWholeBodyAgain(t *testing.T) {
	for _, matcher := range []string{"", "@any prefix_cache_model *\n\t"} {
		t.Run(fmt.Sprintf("matcher %q", matcher), func(t *testing.T) { retryOnStatusSendsTheWholeBodyAgain(t, matcher) })
	}
}

// retryOnStatusSendsTheWholeBodyAgain is the test, behind matcher (and a
// model matcher, which reads the body first, names it @any).
func retryOnStatusSendsTheWholeBodyAgain(t *testing.T, matcher string) {
	use := ""
	if matcher != "" {
		use = "@any "
	}
	site := func(port int, bad, good string) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\t%sreverse_proxy %s%s %s {\n\t\tlb_policy prefix_cache\n\t\tlb_retries 1\n\t\tlb_retry_match {\n\t\t\texpression `{http.reverse_proxy.status_code} == 502`\n\t\t}\n\t}\n}\n", port, matcher, use, bad, good)
	}
	retryResendsBody(t, site, "/v1/chat/completions", 24, func(c int) []byte {
		return chat("sys", words(fmt.Sprintf("retry-status%d", c), 3000))
	})
}

// retryResendsBody sends the bodies gen(c), c < n, declared and chunked,
// to the Caddy that site(port, bad, good) configures in front of an engine
// that answers 502 after reading the whole body and one that answers 200.
// Every request must be served, each engine must receive the client's
// exact bytes, and at least one request must have been retried.
func retryResendsBody(t *testing.T, site func(port int, bad, good string) string, path string, n int, gen func(c int) []byte) {
	t.Helper()
	bad := newBackend(t, "bad")
	bad.handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		w.WriteHeader(http.StatusBadGateway) // after reading it all
		return true
	}
	good := newBackend(t, "good")
	port := freePort(t)
	startCaddy(t, site(port, bad.addr(), good.addr()))
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
	retried := 0
	for c := range n {
		for _, chunked := range []bool{false, true} {
			body := gen(c)
			var r io.Reader = bytes.NewReader(body)
			if chunked {
				r = io.MultiReader(r)
			}
			badBefore, before := bad.count(), good.count()
			resp, err := http.Post(url, "application/json", r)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d (chunked %v): status %d", c, chunked, resp.StatusCode)
			}
			if bad.count() > badBefore {
				retried++
				if got := bad.requests()[badBefore]; got.digest != digest(body) {
					t.Errorf("request %d: the first engine read %d bytes, not the client's %d", c, got.size, len(body))
				}
			}
			if got := good.requests()[before]; got.digest != digest(body) {
				t.Errorf("request %d (chunked %v): the engine after the retry received %d bytes, want the client's %d exactly", c, chunked, got.size, len(body))
			}
		}
	}
	if retried == 0 {
		t.Fatal("no request went to the failing engine first: the retry was not exercised")
	}
	waitHeld(t, 0, "after the requests ended")
}

// handle_response routes run on the engine's answer after the body was
// sent: the client gets the route's answer, and the buffer goes back.
func TestHandleResponseAfterTheBodyWasSent(t *testing.T) {
	up := newBackend(t, "up")
	up.handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		w.WriteHeader(http.StatusInternalServerError)
		return true
	}
	port := freePort(t)
	startCaddy(t, fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy %s {\n\t\tlb_policy prefix_cache\n\t\t@failed status 5xx\n\t\thandle_response @failed {\n\t\t\trespond \"engine failed\" 503\n\t\t}\n\t}\n}\n", port, up.addr()))
	body := chat("sys", words("handle-response", 2000))
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || string(got) != "engine failed" {
		t.Errorf("response %d %q, want 503 %q", resp.StatusCode, got, "engine failed")
	}
	if r := up.requests(); len(r) != 1 || r[0].digest != digest(body) {
		t.Errorf("the engine received %v, want the client's body once", r)
	}
	waitHeld(t, 0, "after the request ended")
}

// body_budget bounds what the buffers hold across requests: while an
// upload that stalled holds the budget, a new request is not read (it goes
// to the fallback, counted as skip "budget") and is still served; once the
// upload completes, requests are routed on again.
func TestBodyBudgetFallsBackAndServes(t *testing.T) {
	waitHeld(t, 0, "before the test")
	caddymodule.SettleBodies() // no idle buffer from earlier tests in the pools
	up := newBackend(t, "up")
	port := freePort(t)
	// A budget of four first buffers (16 KiB each) and the collector's
	// headroom for them.
	budget := int64(4 * 16 << 10 * caddymodule.GCHeadroom())
	admin := startCaddyAdmin(t, fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy %s {\n\t\tlb_policy prefix_cache {\n\t\t\tbody_budget %d\n\t\t}\n\t\theader_down X-Skip {http.reverse_proxy.prefix_cache.skip}\n\t}\n}\n", port, up.addr(), budget))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	// Four chunked uploads that send a little and stall: each holds a
	// first buffer of 16 KiB, which together is the whole budget.
	stalled := make([][]byte, 4)
	conns := make([]net.Conn, 4)
	for i := range conns {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		conns[i] = conn
		stalled[i] = chat("sys", words(fmt.Sprintf("stalled%d", i), 2000))
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", 100, stalled[i][:100])
		waitBuffers(t, int64(i+1)*16<<10, "uploads stalled after 100 bytes")
	}

	before := scrape(t, admin, "caddy_prefix_cache_body_peeks_total")
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			resp, err := http.Post(url, "application/json", bytes.NewReader(chat("sys", fmt.Sprintf("small %d", i))))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Skip") != "budget" {
				t.Errorf("request %d during the stall: %d, skip %q; want 200, budget", i, resp.StatusCode, resp.Header.Get("X-Skip"))
			}
		})
	}
	wg.Wait()
	after := scrape(t, admin, "caddy_prefix_cache_body_peeks_total")
	key := `caddy_prefix_cache_body_peeks_total{outcome="budget"}`
	if after[key]-before[key] != 4 {
		t.Errorf("%s rose by %v, want 4", key, after[key]-before[key])
	}

	// The uploads complete, whole, and the budget is free again.
	for i, conn := range conns {
		rest := stalled[i][100:]
		fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(rest), rest)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("stalled upload %d, completed: %d", i, resp.StatusCode)
		}
		found := false
		for _, r := range up.requests() {
			found = found || r.digest == digest(stalled[i])
		}
		if !found {
			t.Errorf("stalled upload %d did not reach the engine whole", i)
		}
	}
	waitHeld(t, 0, "after the uploads completed")
	// What the stalled uploads allocated is idle in the pools (or, under
	// the race detector, which makes sync.Pool drop buffers, garbage
	// until collected): the next request reuses it.
	caddymodule.SettleBodies()
	resp, err := http.Post(url, "application/json", bytes.NewReader(chat("sys", "after")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if skip := resp.Header.Get("X-Skip"); skip != "" {
		t.Errorf("after the stall: skip %q, want routed", skip)
	}
}

// A retry on status for a request the policy did not route (a JSON body
// of no dialect it knows) still sends the upstream the whole body: the
// fallback's second pick gets the client's bytes, not what the first
// attempt left of them.
func TestRetryOnStatusResendsAnUnroutedBody(t *testing.T) {
	site := func(port int, bad, good string) string {
		return fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy %s %s {\n\t\tlb_policy prefix_cache {\n\t\t\tfallback round_robin\n\t\t}\n\t\tlb_retries 1\n\t\tlb_retry_match {\n\t\t\texpression `{http.reverse_proxy.status_code} == 502`\n\t\t}\n\t}\n}\n", port, bad, good)
	}
	retryResendsBody(t, site, "/v1/embeddings-of-our-own", 8, func(c int) []byte {
		return []byte(fmt.Sprintf(`{"query":%q}`, words(fmt.Sprintf("unrouted%d", c), 3000)))
	})
}

// A body the model matcher read for a reverse_proxy whose policy is not
// prefix_cache goes back once the engine has read it, while the response
// streams: nothing of that handler can send it again.
func TestModelMatcherBodyReleasedWithAStockPolicy(t *testing.T) {
	waitHeld(t, 0, "before the test")
	release := make(chan struct{})
	up := streamingBackend(t, release)
	port := freePort(t)
	startCaddy(t, fmt.Sprintf("http://127.0.0.1:%d {\n\t@any prefix_cache_model *\n\treverse_proxy @any %s {\n\t\tlb_policy round_robin\n\t\tflush_interval -1\n\t}\n}\n", port, up))
	body := []byte(fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}]}`, words("matcher-release", 20000)))
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data:") {
		t.Fatalf("status %d, first event %q, %v", resp.StatusCode, first, err)
	}
	waitBuffers(t, 0, "while the response streams")
	close(release)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitHeld(t, 0, "after the response ended")
}
