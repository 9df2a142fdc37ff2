package caddymodule_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/caddymodule"
)

// TestPooledBodiesUnderLoad sends many distinct bodies at once through a
// real Caddy with prefix_cache, to upstreams that read the whole body,
// answer before reading it, or are not listening (dial errors and
// retries), with clients that hang up as soon as the response starts.
// Every body an upstream reads whole must be the client's, byte for byte,
// while the buffers are recycled between requests; run with -race to
// check that no buffer is read after it went back to its pool.
func TestPooledBodiesUnderLoad(t *testing.T) {
	var releases atomic.Int64
	defer caddymodule.SetBodyReleasedHook(func(int) { releases.Add(1) })()

	var bad atomic.Int64
	var checked atomic.Int64
	verify := func(r *http.Request, body []byte) {
		sum := sha256.Sum256(body)
		if want := r.Header.Get("X-Digest"); hex.EncodeToString(sum[:]) != want {
			bad.Add(1)
			t.Errorf("upstream %s received %d bytes that are not the client's (%s, Content-Length %d)", r.Host, len(body), r.Header.Get("X-Name"), r.ContentLength)
		}
		checked.Add(1)
	}
	reader := newBackend(t, "reader")
	reader.handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		verify(r, body)
		return false
	}
	early := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Answer first, read the body after: Caddy's handler may be
		// done while the transport still writes the request.
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		// Only a body with a length can be checked here: a chunked
		// one read after the answer can arrive cut short without an
		// error, with round_robin as well (measured: 1-2 of ~50 per
		// run), which is net/http's doing, not the policy's.
		body, err := io.ReadAll(r.Body)
		if err == nil && r.ContentLength >= 0 {
			verify(r, body)
		}
	}))
	defer early.Close()
	dead := refusedPort(t)
	port := freePort(t)
	startCaddy(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy 127.0.0.1:%d %s %s {
		lb_policy %s
		lb_retries 3
	}
}
`, port, dead, reader.addr(), strings.TrimPrefix(early.URL, "http://"), "prefix_cache"))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	const clients, each = 8, 24
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 9))
			for i := range each {
				name := fmt.Sprintf("c%d-%d", c, i)
				n := []int{300, 2000, 40000}[rng.IntN(3)]
				if rng.IntN(8) == 0 {
					n = 200000 + rng.IntN(100000)
				}
				body := chat(name, words(name, n/6))
				sum := sha256.Sum256(body)
				var rd io.Reader = bytes.NewReader(body)
				if rng.IntN(3) == 0 {
					rd = io.MultiReader(rd) // chunked
				}
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Digest", hex.EncodeToString(sum[:]))
				req.Header.Set("X-Name", name)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					if rng.IntN(4) != 0 {
						io.Copy(io.Discard, resp.Body)
					}
					resp.Body.Close()
				}
				cancel() // hang up, possibly while Caddy still proxies
			}
		}()
	}
	wg.Wait()
	if checked.Load() == 0 || releases.Load() == 0 {
		t.Fatalf("checked %d bodies, recycled %d buffers: the test exercised nothing", checked.Load(), releases.Load())
	}
	t.Logf("%d bodies checked at the upstreams, %d wrong; %d buffers recycled", checked.Load(), bad.Load(), releases.Load())
}
