package examples_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// budgetLimit is the memory limit the overload tests run Caddy under: the
// default body budget is an eighth of it (at least 16 MiB), so a few
// hundred stalled uploads spend it, as 2,600 spend the 256 MiB default.
const budgetLimit = 128 << 20

// withMemoryLimit sets the process's memory limit, which the default body
// budget derives from, for the rest of the test.
func withMemoryLimit(t *testing.T, limit int64) {
	old := debug.SetMemoryLimit(limit)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

// metric scrapes one unlabelled metric from Caddy's admin /metrics.
func metric(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s = %q: %v", name, v, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// multiModel is examples/multi-model.Caddyfile served on plain HTTP at
// port, its Llama pool's addresses replaced by llama's and its Qwen
// pool's by qwen's.
func multiModel(t *testing.T, port string, llama, qwen []*engine) []byte {
	t.Helper()
	src, err := os.ReadFile("multi-model.Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(src), "llm.example.com {", "http://127.0.0.1:"+port+" {", 1)
	for i, e := range llama {
		s = strings.ReplaceAll(s, fmt.Sprintf("10.0.0.%d:8000", 11+i), e.addr)
	}
	for i, e := range qwen {
		s = strings.ReplaceAll(s, fmt.Sprintf("10.0.1.%d:8000", 11+i), e.addr)
	}
	if strings.Contains(s, "10.0.") || !strings.Contains(s, "http://127.0.0.1:"+port) {
		t.Fatalf("multi-model.Caddyfile changed shape; rewrite it here too:\n%s", s)
	}
	return []byte(s)
}

// modelBody is a chat request for model whose system prompt is about n
// bytes, for conversation conv (the engines answer it); an empty model
// names none.
func modelBody(model string, conv, n int) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": model,
		"messages": []map[string]string{
			{"role": "system", "content": fmt.Sprintf("conversation c%02d. %s", conv, words(fmt.Sprintf("sys%d", conv), n/9))},
			{"role": "user", "content": "question 1"},
		},
	})
	return b
}

// ask posts body and returns the status and the engine that answered
// (by its answers), or "" when no engine did.
func ask(t *testing.T, client *http.Client, url string, body []byte, engines []*engine) (int, string) {
	t.Helper()
	before := map[string]int{}
	for _, e := range engines {
		before[e.name] = len(e.answered())
	}
	resp, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, e := range engines {
		if len(e.answered()) > before[e.name] {
			return resp.StatusCode, e.name
		}
	}
	return resp.StatusCode, ""
}

// stallUploads opens n chunked HTTP/1.1 uploads to addr, each sending the
// first sent bytes of a chat request for model, then nothing: a
// stalled-upload attack. It returns the connections; closing one ends its
// upload.
func stallUploads(t *testing.T, addr, model string, n, sent int) []net.Conn {
	t.Helper()
	head := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"`, model)
	body := head + strings.Repeat("x", sent-len(head))
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("upload %d: %v", len(conns), err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(body), body)
	}
	return conns
}

// headroom is what a buffer byte costs the body budget at Go's default
// GOGC: buffers get half the budget (caddymodule/budget.go).
const headroom = 2.0

// spend stalls uploads to the Caddy at addr, 40 KB each (a 64 KiB buffer
// when read), a batch at a time, until no buffer of 1 MiB fits beside the
// buffers they hold. Uploads that arrive while buffers dropped by earlier
// requests still count (until the collector frees them) are not read,
// hence the batches. It returns the uploads' connections.
func spend(t *testing.T, admin, addr string, budget float64) []net.Conn {
	t.Helper()
	var conns []net.Conn
	spent := func() bool {
		return metric(t, admin, "caddy_prefix_cache_body_bytes_in_use")*headroom+float64(1<<20) > budget
	}
	for len(conns) < 8*int(budget/headroom)/(64<<10) {
		conns = append(conns, stallUploads(t, addr, "qwen2.5-7b", int(budget/headroom)/(64<<10)/4, 40_000)...)
		deadline := time.Now().Add(2 * time.Second)
		for !spent() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling Caddy's gauge: nothing signals it
		}
		if spent() {
			return conns
		}
	}
	t.Fatalf("%d stalled uploads did not spend the body budget: %v bytes in use of %v", len(conns),
		metric(t, admin, "caddy_prefix_cache_body_bytes_in_use"), budget)
	return nil
}

// TestMultiModelFailsOpen runs examples/multi-model.Caddyfile as shipped
// under the stalled-upload attack: uploads that send 40 KB of a body and
// stall, until the body budget is spent. The model matcher can then read
// no body; requests must still be served (by the Llama pool, which the
// example names with fail_open), never answered "unknown model", and the
// /llama/ path route keeps working.
func TestMultiModelFailsOpen(t *testing.T) {
	withMemoryLimit(t, budgetLimit)
	llama := []*engine{startEngine(t, "l0"), startEngine(t, "l1"), startEngine(t, "l2"), startEngine(t, "l3")}
	qwen := []*engine{startEngine(t, "q0"), startEngine(t, "q1")}
	all := append(append([]*engine{}, llama...), qwen...)
	_, port, _ := net.SplitHostPort(freeAddr(t))
	admin := runCaddyfile(t, multiModel(t, port, llama, qwen), nil)
	url := "http://127.0.0.1:" + port
	client := &http.Client{Timeout: 30 * time.Second}
	pool := func(name string) string {
		if name == "" {
			return "none"
		}
		return map[byte]string{'l': "llama", 'q': "qwen"}[name[0]]
	}

	big := modelBody("qwen2.5-7b", 1, 600_000)
	if code, e := ask(t, client, url, big, all); code != http.StatusOK || pool(e) != "qwen" {
		t.Fatalf("before the attack, a 600 KB qwen request: %d from %q, want 200 from the qwen pool", code, e)
	}

	budget := metric(t, admin, "caddy_prefix_cache_body_budget_bytes")
	spend(t, admin, "127.0.0.1:"+port, budget)
	seen := map[string]int{}
	for i, tt := range []struct {
		model, path string
		size        int
	}{
		{"qwen2.5-7b", "", 600_000},
		{"qwen2.5-7b", "", 2_000},
		{"llama-3.1-70b-instruct", "", 600_000},
		{"llama-3.1-70b-instruct", "/llama", 2_000},
		{"", "/llama", 600_000},
	} {
		code, e := ask(t, client, url+tt.path, modelBody(tt.model, 10+i, tt.size), all)
		seen[fmt.Sprintf("%d %s", code, pool(e))]++
		if code != http.StatusOK {
			t.Errorf("under the attack, model %q at %q (%d bytes): %d from %q, want 200", tt.model, tt.path+"/v1/chat/completions", tt.size, code, e)
		}
	}
	t.Logf("under the attack: %v", seen)
}

// TestBudgetRecoversAfterAttack runs examples/multi-model.Caddyfile under
// the stalled-upload attack until the body budget is spent, then ends
// the attack: within 10 s of the last upload closing, a 600 KB request is
// read and routed by its model again. On an idle edge nothing else
// allocates, so the collector waits for its two-minute cycle; here the
// test's own clients allocate in Caddy's process, so the collector's
// pacing is off (GOGC=off, as far as the runtime is concerned): it runs
// only when asked or at the memory limit. On a busy edge, small requests
// keep the pools' small buffers in use throughout, and the ended uploads'
// buffers stop counting before the 600 KB request is sent. On an idle
// edge they may count until a request does not fit: the buffers come back
// while a collection asked for during the attack, when requests held
// them all, is still deciding that collecting frees nothing, and it stops
// the policy asking again. That request is served by the fail_open pool
// and asks for the collection, so the test sends 600 KB requests until
// one is routed by its model.
func TestBudgetRecoversAfterAttack(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "busy"}[busy], func(t *testing.T) {
			withMemoryLimit(t, budgetLimit)
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			llama := []*engine{startEngine(t, "l0"), startEngine(t, "l1"), startEngine(t, "l2"), startEngine(t, "l3")}
			qwen := []*engine{startEngine(t, "q0"), startEngine(t, "q1")}
			all := append(append([]*engine{}, llama...), qwen...)
			_, port, _ := net.SplitHostPort(freeAddr(t))
			admin := runCaddyfile(t, multiModel(t, port, llama, qwen), nil)
			url := "http://127.0.0.1:" + port
			client := &http.Client{Timeout: 30 * time.Second}
			budget := metric(t, admin, "caddy_prefix_cache_body_budget_bytes")

			conns := spend(t, admin, "127.0.0.1:"+port, budget)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if busy {
				for c := range 2 {
					wg.Go(func() {
						for i := 0; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							body := modelBody("qwen2.5-7b", 20+c, 2_000+i%7*1000)
							if resp, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body)); err == nil {
								io.Copy(io.Discard, resp.Body)
								resp.Body.Close()
							}
						}
					})
				}
			}
			defer func() { close(stop); wg.Wait() }()

			for _, c := range conns {
				c.Close()
			}
			ended := time.Now()
			// Reading the 600 KB body grows its buffer from 16 KiB by
			// doubling, and the smaller buffers stay allocated (idle in
			// their pools) while the read goes on: under 2 MiB in all,
			// each byte with the collector's headroom.
			if busy {
				poll(t, 10*time.Second, "the ended uploads' buffers to stop counting against the budget", func() bool {
					return (metric(t, admin, "caddy_prefix_cache_body_bytes_allocated")+float64(2<<20))*headroom <= budget
				})
			}
			fellOpen := 0
			poll(t, 10*time.Second, "a 600 KB qwen request to be read and routed by its model", func() bool {
				code, e := ask(t, client, url, modelBody("qwen2.5-7b", 1, 600_000), all)
				if code == http.StatusOK && e != "" && e[0] == 'q' {
					return true
				}
				if busy || code != http.StatusOK || e == "" {
					t.Fatalf("%v after the attack ended, a 600 KB qwen request: %d from %q, want 200 from the qwen pool", time.Since(ended).Round(time.Millisecond), code, e)
				}
				fellOpen++
				return false
			})
			t.Logf("a 600 KB buffer fit %v after the attack ended, after %d request(s) served by the fail_open pool", time.Since(ended).Round(time.Millisecond), fellOpen)
		})
	}
}
