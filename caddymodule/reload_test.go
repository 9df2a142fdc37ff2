package caddymodule_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// Concurrent selections and recordings across config reloads: clients
// keep sending while the config is replaced again and again with one that
// changes the policy's bound, its fallback, the upstreams' order and set,
// and the proxy's options, but keeps chunk_size and max_entries. No
// request fails or arrives damaged, the race detector sees the index, the
// metrics and the janitor used from requests and reloads at once, and the
// index survives every reload: a prompt learned before the first one
// still draws requests to its home after the last. forget_after is short,
// so the janitor also forgets the upstream that comes and goes while
// requests record and match.
func TestReloadUnderLoad(t *testing.T) {
	bs := newBackends(t, 5)
	ports := distinctPorts(t, 3)
	port := ports[0]
	storage := t.TempDir()
	site := func(i int) string {
		// Rotate the first four backends; every third config adds the
		// fifth, so the pool itself changes.
		n := 4
		if i%3 == 2 {
			n = 5
		}
		var dials []string
		for k := range n {
			dials = append(dials, bs[(k+i)%4].addr())
			if k == 4 {
				dials[k] = bs[4].addr()
			}
		}
		fallback := []string{"least_conn", "round_robin", "random"}[i%3]
		return fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy prefix_cache {
			chunk_size 128
			max_entries 200000
			load_factor %v
			load_allowance %d
			min_match 512
			forget_after 100ms
			fallback %s
		}
		lb_retries %d
		header_up X-Config %d
	}
}
`, port, strings.Join(dials, " "), 1.25+0.25*float64(i%2), 4+i%5, fallback, i%3, i)
	}
	load := func(i int) {
		t.Helper()
		if err := caddy.Load(caddyfileJSON(t, globalBlock("admin off", storage, ports[1], ports[2])+site(i)), true); err != nil {
			t.Fatalf("loading config %d: %v", i, err)
		}
	}
	load(0)
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping Caddy: %v", err)
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	// Learn the homes of a few long system prompts before any reload.
	var systems, homes []string
	for j := range 6 {
		systems = append(systems, words(fmt.Sprintf("reload-survivor-%d", j), 400))
		home, _ := post(t, http.DefaultClient, url, chat(systems[j], "first question"))
		homes = append(homes, home)
	}

	const workers, reloads, perConfig = 4, 12, 6
	var dropped, arrived sync.Map // request IDs
	for _, b := range bs {
		b.handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			if id := r.Header.Get("X-Req-Id"); id != "" {
				arrived.Store(id, true)
			}
			return false
		}
	}
	progress := make(chan struct{}, workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			client := &http.Client{}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Conversations of a few turns each, so requests both
				// record new prefixes and match learned ones.
				conv, turn := i/3, i%3
				var turns []string
				for k := 0; k <= turn; k++ {
					turns = append(turns, words(fmt.Sprintf("w%d-c%d-t%d", w, conv, k), 60), "ok")
				}
				body := chat("worker system", turns[:len(turns)-1]...)
				id := fmt.Sprintf("w%d-%d", w, i)
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Req-Id", id)
				resp, err := client.Do(req)
				if err != nil {
					// A connection Caddy dropped at a reload: Linux resets
					// connections queued on a listener Caddy closes (it
					// listens anew with SO_REUSEPORT), and the old server
					// closes idle keep-alive connections, racing a request
					// sent on one. Stock least_conn loses the same; it is
					// not this policy's doing as long as the request never
					// reached an upstream, which is checked at the end.
					dropped.Store(id, err)
					continue
				}
				out, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(out, fmt.Appendf(nil, `"bytes":%d}`, len(body))) {
					errs <- fmt.Errorf("worker %d request %d: status %d, %q, %v; want 200 and the %d bytes sent", w, i, resp.StatusCode, out, err, len(body))
					return
				}
				select {
				case progress <- struct{}{}:
				case <-stop:
					return
				}
			}
		})
	}
	// Each config serves some requests before the next replaces it; a
	// worker that failed stops the test.
	wait := func(n int) bool {
		for range n {
			select {
			case <-progress:
			case err := <-errs:
				t.Error(err)
				return false
			}
		}
		return true
	}
	ok := wait(perConfig)
	for i := 1; ok && i <= reloads; i++ {
		load(i)
		ok = wait(perConfig)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !ok {
		return
	}
	// Every request that failed at the connection never reached an
	// upstream: none was lost after Caddy took it in.
	ndropped := 0
	dropped.Range(func(id, err any) bool {
		ndropped++
		if _, ok := arrived.Load(id); ok {
			t.Errorf("request %s reached an upstream, but its client got %v", id, err)
		}
		return true
	})
	t.Logf("%d reloads; %d requests dropped by Caddy's listener switch before reaching the handler", reloads, ndropped)

	// The index survived: a new question after each learned system prompt
	// goes to that prompt's home. With a fresh index, rendezvous hashing
	// would place each of the six independently over the pool, all six at
	// their old homes with probability 4^-6.
	for j, system := range systems {
		if got := probe(t, url, chat(system, fmt.Sprintf("a question after %d reloads", reloads))); got != homes[j] {
			t.Errorf("after %d reloads, a question after system prompt %d went to %s, want its home %s", reloads, j, got, homes[j])
		}
	}
}

// probe posts body on a new connection and returns the backend that
// answered, retrying a connection the last reload's listener switch
// dropped (see the workers above).
func probe(t *testing.T, url string, body []byte) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		tr := &http.Transport{DisableKeepAlives: true}
		resp, err := (&http.Client{Transport: tr}).Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			if attempt < 5 {
				continue
			}
			t.Fatalf("POST %s: %v", url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: status %d", url, resp.StatusCode)
		}
		return resp.Header.Get("X-Backend")
	}
}
