package caddymodule_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// These tests run a real Caddy in this process (caddy.Load) in front of
// real HTTP backends. Caddy holds one config per process, so they do not
// run in parallel.

func proxySite(port int, upstreams []*backend, proxyOptions, policyOptions string) string {
	var dials []string
	for _, b := range upstreams {
		dials = append(dials, b.addr())
	}
	return fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy prefix_cache {
			%s
		}
		%s
	}
}
`, port, strings.Join(dials, " "), policyOptions, proxyOptions)
}

// twoSites starts Caddy with two sites over the same upstreams, which
// share one index, with policy options a and b, and returns their chat
// completions URLs and the admin API's base URL.
func twoSites(t *testing.T, upstreams []*backend, proxyOptions, a, b string) (urlA, urlB, admin string) {
	t.Helper()
	portA, portB := freePort(t), freePort(t)
	admin = startCaddyAdmin(t, proxySite(portA, upstreams, proxyOptions, a)+proxySite(portB, upstreams, proxyOptions, b))
	url := func(port int) string { return fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port) }
	return url(portA), url(portB), admin
}

// settled waits until the policies of the Caddy behind admin have given
// back every request's routing text. The policy settles a request after
// its handler returns, so a request sent the instant the last answer
// arrives can still find that one in flight, its prefill queued.
func settled(t *testing.T, admin string) {
	t.Helper()
	waitFor(t, func() int64 {
		var n int64
		for _, b := range inFlightBytes(t, admin) {
			n += b
		}
		return n
	}, 0, "every request settled")
}

func newBackends(t *testing.T, n int) []*backend {
	var bs []*backend
	for i := range n {
		bs = append(bs, newBackend(t, fmt.Sprintf("b%d", i)))
	}
	return bs
}

// (a) Every turn of a conversation lands on the backend that served its
// first turn, and distinct conversations spread over the fleet.
//
// Each turn is sent once the previous one is settled (its bytes given
// back, as the admin API shows), as a client's next turn follows the
// answer. The policy settles a request after its handler returns, so a
// turn sent the instant the answer arrives can still see the previous
// one in flight at home, as prefill queued there; these turns are
// shorter than min_match, so the cost would rightly move them.
func TestConversationAffinity(t *testing.T) {
	bs := newBackends(t, 4)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", ""))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	used := map[string]bool{}
	for c := range 12 {
		system := "You are a helpful assistant."
		var turns []string
		var home string
		for turn := range 5 {
			turns = append(turns, words(fmt.Sprintf("conv%d-user%d", c, turn), 60))
			got, _ := post(t, http.DefaultClient, url, chat(system, turns...))
			settled(t, admin)
			if turn == 0 {
				home = got
			} else if got != home {
				t.Errorf("conversation %d turn %d went to %s, want %s (its first turn's backend)", c, turn, got, home)
			}
			turns = append(turns, words(fmt.Sprintf("conv%d-assistant%d", c, turn), 40))
		}
		used[home] = true
	}
	if len(used) < 2 {
		t.Errorf("12 conversations used backends %v, want them spread over at least 2 of 4", used)
	}
}

// (b) Conversations that share a long system prompt land where that prompt
// is cached, instead of being spread by their placement keys.
func TestSharedSystemPromptLandsWhereCached(t *testing.T) {
	bs := newBackends(t, 4)
	port := freePort(t)
	startCaddy(t, proxySite(port, bs, "", ""))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	system := words("long-system-prompt", 800) // ~20 KB, far above min_match
	home, _ := post(t, http.DefaultClient, url, chat(system, "first question"))
	for c := range 8 {
		got, _ := post(t, http.DefaultClient, url, chat(system, words(fmt.Sprintf("question%d", c), 20)))
		if got != home {
			t.Errorf("conversation %d sharing the system prompt went to %s, want %s where the prompt is cached", c, got, home)
		}
	}

	// A different system prompt is not drawn to that backend: over a few
	// unrelated conversations, at least one lands elsewhere.
	elsewhere := 0
	for c := range 8 {
		got, _ := post(t, http.DefaultClient, url, chat(words(fmt.Sprintf("other-system-%d", c), 800), "hi"))
		if got != home {
			elsewhere++
		}
	}
	if elsewhere == 0 {
		t.Errorf("8 conversations with unrelated system prompts all went to %s, want them placed independently", home)
	}
}

// Tenants never share index entries: with a tenant key set, tenants
// sending the same long system prompt are placed independently instead of
// all being drawn to where the first tenant's copy is cached.
func TestTenantsDoNotShareEntries(t *testing.T) {
	bs := newBackends(t, 4)
	port := freePort(t)
	startCaddy(t, proxySite(port, bs, "", "tenant {http.request.header.X-Tenant}"))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	send := func(tenant string, body []byte) string {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("X-Backend")
	}
	system := words("same-system-prompt", 800)
	used := map[string]int{}
	for i := range 12 {
		used[send(fmt.Sprintf("tenant-%d", i), chat(system, "same question"))]++
	}
	// Sharing entries would put all twelve on the first one's backend;
	// independent placement does so with probability 4 x (1/4)^12.
	if len(used) < 2 {
		t.Errorf("12 tenants with the same prompt all went to %v, want independent placement", used)
	}
	// Within one tenant, the prompt's cached home still wins.
	home := send("tenant-0", chat(system, "another question"))
	for i := range 4 {
		if got := send("tenant-0", chat(system, fmt.Sprintf("question %d", i))); got != home {
			t.Errorf("tenant-0's request %d went to %s, want %s where its copy is cached", i, got, home)
		}
	}
}

// (c) A backend that fails its active health checks receives no traffic.
func TestUnhealthyBackendReceivesNothing(t *testing.T) {
	bs := newBackends(t, 3)
	sick := bs[1]
	checked := make(chan struct{}, 100)
	for _, b := range bs {
		b := b
		b.handle = func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
			if r.URL.Path != "/health" {
				return false
			}
			if b == sick {
				w.WriteHeader(http.StatusServiceUnavailable)
				select {
				case checked <- struct{}{}:
				default:
				}
				return true
			}
			w.WriteHeader(http.StatusOK)
			return true
		}
	}
	port := freePort(t)
	startCaddy(t, proxySite(port, bs, `
		health_uri /health
		health_interval 20ms
		health_timeout 1s`, ""))
	// Two failed checks seen by the backend mean the first one's result
	// has been recorded by Caddy before the second was sent.
	for range 2 {
		select {
		case <-checked:
		case <-time.After(10 * time.Second):
			t.Fatal("no active health check reached the failing backend")
		}
	}

	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	for c := range 30 {
		post(t, http.DefaultClient, url, chat("sys", words(fmt.Sprintf("c%d", c), 50)))
	}
	for _, r := range sick.requests() {
		if r.path != "/health" {
			t.Errorf("unhealthy backend received %s", r.path)
		}
	}
	if bs[0].count()+bs[2].count() == 0 {
		t.Error("healthy backends received nothing")
	}
}

// (d) With one backend held busy by long streams, requests whose prefix it
// holds stay there while it is under the load bound and spill to the other
// backend, also under the bound, once it is not.
func TestBusyBackendSpills(t *testing.T) {
	bs := newBackends(t, 2)
	release := make(chan struct{})
	holdStreams(bs, release)
	port := freePort(t)
	const loadFactor, allowance = 1, 1
	startCaddy(t, proxySite(port, bs, "", fmt.Sprintf(`
			load_factor %d
			load_allowance %d`, loadFactor, allowance)))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	system := words("shared", 400)
	home, _ := post(t, http.DefaultClient, url, chat(system, "warm up"))

	var open []*http.Response
	defer func() {
		close(release)
		for _, r := range open {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}()
	load := map[string]int{}
	spills := 0
	for i := range 8 {
		resp := openStream(t, url, chat(system, fmt.Sprintf("stream %d", i)))
		open = append(open, resp)
		got := resp.Header.Get("X-Backend")
		bound := (loadFactor*(load["b0"]+load["b1"]+1)+1)/2 + allowance
		if load[got]+1 > bound {
			t.Errorf("stream %d went to %s carrying %d in flight, over the bound %d", i, got, load[got], bound)
		}
		if spills == 0 {
			// Only home holds the prefix: it must be chosen while it is
			// under the bound, and left once it is not.
			want := home
			if load[home]+1 > bound {
				want = otherThan(bs, home)
			}
			if got != want {
				t.Errorf("stream %d went to %s (loads %v, bound %d), want %s", i, got, load, bound, want)
			}
		}
		if got != home {
			spills++
		}
		load[got]++
	}
	if spills == 0 {
		t.Errorf("no request spilled from %s with loads %v", home, load)
	}
}

func otherThan(bs []*backend, name string) string {
	for _, b := range bs {
		if b.name != name {
			return b.name
		}
	}
	return ""
}

// (e) The upstream receives the client's exact bytes, whatever the body.
func TestBodiesArriveByteForByte(t *testing.T) {
	bs := newBackends(t, 2)
	port := freePort(t)
	startCaddy(t, proxySite(port, bs, "", "max_body 4KiB"))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	big := chat("sys", words("big", 20000)) // far larger than max_body
	cases := []struct {
		name        string
		body        []byte
		contentType string
		chunked     bool
	}{
		{"json", chat("sys", "hello"), "application/json", false},
		{"chunked json", chat("sys", words("chunked", 200)), "application/json", true},
		{"larger than max_body", big, "application/json", false},
		{"larger than max_body chunked", big, "application/json", true},
		{"exactly max_body", padTo(4096), "application/json", false},
		{"max_body + 1", padTo(4097), "application/json", false},
		{"malformed json", []byte(`{"model":"m","messages":[{"role":"user","content":"trunc`), "application/json", false},
		{"empty", nil, "application/json", false},
		{"not json", []byte("hello, plain text"), "text/plain", false},
		{"binary", []byte{0, 1, 2, 0xff, 0xfe, '{'}, "application/octet-stream", false},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tt.body)
			if tt.chunked {
				r = io.MultiReader(r) // hides the length: the client sends chunked
			}
			req, err := http.NewRequest(http.MethodPost, url, r)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tt.contentType)
			before := counts(bs)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			got := newRequest(t, bs, before)
			if got.digest != digest(tt.body) || got.size != len(tt.body) {
				t.Errorf("upstream received %d bytes (sha256 %s), want %d bytes (sha256 %s)", got.size, got.digest[:12], len(tt.body), digest(tt.body)[:12])
			}
			if got.chunked != (tt.chunked && len(tt.body) > 0) {
				t.Errorf("upstream chunked = %v, want %v", got.chunked, tt.chunked)
			}
			if !tt.chunked && got.contentLength != int64(len(tt.body)) {
				t.Errorf("upstream Content-Length = %d, want %d", got.contentLength, len(tt.body))
			}
		})
	}
}

// (e, continued) A request retried after a dial error reaches the next
// upstream whole, and the policy does not choose the failed upstream again.
func TestRetryAfterDialErrorKeepsBody(t *testing.T) {
	live := newBackend(t, "live")
	deadPort := refusedPort(t)
	port := freePort(t)
	startCaddy(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy 127.0.0.1:%d %s {
		lb_policy prefix_cache
		lb_retries 2
	}
}
`, port, deadPort, live.addr()))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	// With two upstreams and rendezvous placement, about half of these
	// pick the dead one first (all 24 avoiding it has probability 2^-24).
	for c := range 24 {
		for _, chunked := range []bool{false, true} {
			body := chat("sys", words(fmt.Sprintf("retry%d", c), 300))
			var r io.Reader = bytes.NewReader(body)
			if chunked {
				r = io.MultiReader(r)
			}
			before := live.count()
			resp, err := http.Post(url, "application/json", r)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("conversation %d (chunked %v): status %d", c, chunked, resp.StatusCode)
			}
			got := live.requests()[before]
			if got.digest != digest(body) {
				t.Errorf("conversation %d (chunked %v): live upstream received %d bytes, want the client's %d exactly", c, chunked, got.size, len(body))
			}
		}
	}
}

// (f) Server-sent events pass through as the upstream produces them.
func TestStreamsAreNotBuffered(t *testing.T) {
	bs := newBackends(t, 2)
	next := make(chan struct{})
	for _, b := range bs {
		b.handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: {\"token\":%d}\n\n", i)
				w.(http.Flusher).Flush()
				select {
				case <-next: // the client has read this event
				case <-r.Context().Done():
					return true
				}
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return true
		}
	}
	port := freePort(t)
	startCaddy(t, proxySite(port, bs, "", ""))
	body := chat("sys", "stream please")
	body = append(body[:len(body)-1], []byte(`,"stream":true}`)...)
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for i := range 3 {
		// The upstream waits for us before it writes the next event, so
		// reading this one proves it was not held back in a buffer.
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf("data: {\"token\":%d}\n", i); line != want {
			t.Fatalf("event %d = %q, want %q", i, line, want)
		}
		rd.ReadString('\n') // the blank line ending the event
		next <- struct{}{}
	}
}

// (g) A `tls internal` site serves HTTPS over HTTP/2 in front of the
// backends, and the policy sees the request body as it does over HTTP/1.1.
func TestTLSInternalHTTP2(t *testing.T) {
	bs := newBackends(t, 3)
	port := freePort(t)
	var dials []string
	for _, b := range bs {
		dials = append(dials, b.addr())
	}
	storage := startCaddy(t, fmt.Sprintf(`https://localhost:%d {
	tls internal
	reverse_proxy %s {
		lb_policy prefix_cache
	}
}
`, port, strings.Join(dials, " ")))

	rootPEM, err := os.ReadFile(filepath.Join(storage, "pki", "authorities", "local", "root.crt"))
	if err != nil {
		t.Fatalf("reading Caddy's local root: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatal("no certificate in Caddy's root.crt")
	}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: true,
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitForCertificate(t, ctx, fmt.Sprintf("localhost:%d", port), roots)

	url := fmt.Sprintf("https://localhost:%d/v1/chat/completions", port)
	var home string
	var turns []string
	for turn := range 4 {
		turns = append(turns, words(fmt.Sprintf("tls-user%d", turn), 100))
		body := chat("sys", turns...)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("HTTPS request: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("response protocol %s, want HTTP/2", resp.Proto)
		}
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
			t.Fatal("response not over TLS")
		}
		got := resp.Header.Get("X-Backend")
		if turn == 0 {
			home = got
		} else if got != home {
			t.Errorf("turn %d over HTTP/2 went to %s, want %s", turn, got, home)
		}
		for _, b := range bs {
			if b.name != got {
				continue
			}
			rs := b.requests()
			if last := rs[len(rs)-1]; last.digest != digest(body) {
				t.Errorf("turn %d: upstream received %d bytes, want the client's %d exactly", turn, last.size, len(body))
			}
		}
		turns = append(turns, "ok")
	}
}

// waitForCertificate waits until Caddy's internal CA has issued the site's
// certificate, which it does in the background after the config loads.
func waitForCertificate(t *testing.T, ctx context.Context, addr string, roots *x509.CertPool) {
	t.Helper()
	dialer := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: "localhost"}}
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no valid certificate from %s: %v", addr, err)
		case <-time.After(wait):
		}
	}
}

func padTo(n int) []byte {
	prefix := []byte(`{"model":"m","messages":[{"role":"user","content":"`)
	suffix := []byte(`"}]}`)
	body := append([]byte{}, prefix...)
	body = append(body, bytes.Repeat([]byte("x"), n-len(prefix)-len(suffix))...)
	return append(body, suffix...)
}

// counts snapshots how many requests each backend has received.
func counts(bs []*backend) []int {
	var n []int
	for _, b := range bs {
		n = append(n, b.count())
	}
	return n
}

// newRequest returns the single request the backends received since the
// snapshot before was taken.
func newRequest(t *testing.T, bs []*backend, before []int) received {
	t.Helper()
	var got []received
	for i, b := range bs {
		got = append(got, b.requests()[before[i]:]...)
	}
	if len(got) != 1 {
		t.Fatalf("backends received %d requests, want 1", len(got))
	}
	return got[0]
}
