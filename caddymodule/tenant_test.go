package caddymodule_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// Tenants that hold, through a real Caddy: an empty tenant value is no
// tenant of its own unless the operator says so, requests the engines
// reject teach the index nothing that could evict another tenant's
// affinity, and one tenant's accepted traffic holds at most tenant_share
// of the index.

// postAs posts body with the given Authorization (none if empty) and
// returns the status and the routing reason.
func postAs(t *testing.T, url, auth string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-PC-Reason") + "/" + resp.Header.Get("X-PC-Skip")
}

const reasonHeaders = "header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}\n\t\theader_down X-PC-Skip {http.reverse_proxy.prefix_cache.skip}"

// With tenant set, a request whose tenant value is empty goes to the
// fallback (skip no_tenant) instead of sharing entries with every other
// anonymous client; allow_empty_tenant routes them as one tenant.
func TestEmptyTenantFallsBack(t *testing.T) {
	bs := newBackends(t, 2)
	tenant := "tenant {http.request.header.Authorization}"
	urlStrict, urlOpen, admin := twoSites(t, bs, reasonHeaders, tenant, tenant+"\n\t\t\tallow_empty_tenant")
	body := chat(words("anon-system", 400), "hi")
	for i := range 2 {
		if _, got := postAs(t, urlStrict, "", body); got != "fallback/no_tenant" {
			t.Errorf("anonymous request %d, strict site: %q, want fallback/no_tenant", i, got)
		}
	}
	if _, got := postAs(t, urlStrict, "Bearer a", body); !strings.HasPrefix(got, "cold") {
		t.Errorf("authenticated request: %q, want routed (cold)", got)
	}
	// Each request once the one before is settled: one still in flight
	// would be prefill queued at its backend, and the cold choice would
	// weigh it (reason prefill).
	settled(t, admin)
	_, first := postAs(t, urlOpen, "", body)
	settled(t, admin)
	_, second := postAs(t, urlOpen, "", body)
	if !strings.HasPrefix(first, "cold") || !strings.HasPrefix(second, "match") {
		t.Errorf("anonymous requests with allow_empty_tenant: %q then %q, want cold then match", first, second)
	}
}

// The attack, reproduced: a tenant's conversation is established
// (its engine answered), then a flood of large prompts under made-up keys,
// which the engines reject with 401, records more chunks than the whole
// index holds. The tenant's next turn is still a match: unconfirmed
// records only churn the index's probation share. The control run accepts
// the same flood (its records are confirmed), and the conversation's
// prefix is gone, so the workload would show the damage if rejected
// records could do it.
func TestRejectedFloodCannotWipeConfirmedTenant(t *testing.T) {
	for _, tt := range []struct {
		name      string
		accept    bool
		wantMatch bool
	}{
		{"flood rejected", false, true},
		{"flood accepted (control)", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := newBackends(t, 4)
			for _, b := range bs {
				b.handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
					if !tt.accept && r.Header.Get("Authorization") != "Bearer victim" {
						w.WriteHeader(http.StatusUnauthorized)
						return true
					}
					return false
				}
			}
			port := freePort(t)
			admin := startCaddyAdmin(t, proxySite(port, bs, reasonHeaders, "tenant {http.request.header.Authorization}\n\t\t\tmax_entries 16384\n\t\t\ttenant_share 1"))
			url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

			system := words("victim-system", 800)
			turn := []string{"first question", "first answer"}
			if code, got := postAs(t, url, "Bearer victim", chat(system, turn[0])); code != 200 || !strings.HasPrefix(got, "cold") {
				t.Fatalf("victim's first turn: %d %q", code, got)
			}
			if code, got := postAs(t, url, "Bearer victim", chat(system, turn[0], turn[1], "second")); code != 200 || !strings.HasPrefix(got, "match") {
				t.Fatalf("victim's second turn: %d %q, want a match", code, got)
			}

			r := rand.New(rand.NewPCG(1, 2))
			for i := range 24 { // 24 x 2048 chunks: three times the index
				prompt := make([]byte, 512<<10)
				for j := range prompt {
					prompt[j] = 'a' + byte(r.IntN(26))
				}
				code, _ := postAs(t, url, fmt.Sprintf("Bearer attacker-%d", i), []byte(`{"model":"test-model","prompt":"`+string(prompt)+`"}`))
				if want := map[bool]int{false: 401, true: 200}[tt.accept]; code != want {
					t.Fatalf("flood request %d: %d, want %d", i, code, want)
				}
			}
			// The client can read a 401 before Caddy has ended its
			// request: wait until no flood request's bytes count
			// against the byte bound, so that only the index decides.
			waitFor(t, func() int64 {
				held := int64(0)
				for _, n := range inFlightBytes(t, admin) {
					held += n
				}
				return held
			}, 0, "routing-text bytes in flight after the flood")
			_, got := postAs(t, url, "Bearer victim", chat(system, turn[0], turn[1], "second", "second answer", "third"))
			if matched := strings.HasPrefix(got, "match"); matched != tt.wantMatch {
				t.Errorf("victim's third turn after the flood: %q, want match %v", got, tt.wantMatch)
			}
		})
	}
}

// One tenant's accepted flood of unique prompts holds no more than
// tenant_share of the index.
func TestTenantHoldsAtMostItsShare(t *testing.T) {
	bs := newBackends(t, 2)
	port := freePort(t)
	const maxEntries = 16384
	admin := startCaddyAdmin(t, proxySite(port, bs, "", fmt.Sprintf("tenant {http.request.header.Authorization}\n\t\t\tmax_entries %d\n\t\t\ttenant_share 0.25", maxEntries)))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	r := rand.New(rand.NewPCG(3, 4))
	for range 16 { // 16 x 2048 chunks: twice the index
		prompt := make([]byte, 512<<10)
		for j := range prompt {
			prompt[j] = 'a' + byte(r.IntN(26))
		}
		if code, _ := postAs(t, url, "Bearer flooder", []byte(`{"model":"test-model","prompt":"`+string(prompt)+`"}`)); code != 200 {
			t.Fatalf("flood request: %d", code)
		}
	}
	if got := getStats(t, admin).Instances[0].Entries; got > maxEntries/4 {
		t.Errorf("one tenant's flood left %d entries, more than its share %d", got, maxEntries/4)
	} else if got < maxEntries/8 {
		t.Errorf("one tenant's flood left %d entries: the flood did not fill its share (%d)", got, maxEntries/4)
	}
}

// hash_key is read through its placeholder at load, refused when shorter
// than 16 bytes (an unset environment variable), and never printed, in
// an error or otherwise.
func TestHashKeyRefusedWhenShort(t *testing.T) {
	t.Setenv("PC_SHORT_HASH_KEY", "short-secret")
	var cfg caddy.Config
	site := fmt.Sprintf("http://127.0.0.1:%d {\n\treverse_proxy 127.0.0.1:1 {\n\t\tlb_policy prefix_cache {\n\t\t\thash_key {env.PC_SHORT_HASH_KEY}\n\t\t}\n\t}\n}\n", freePort(t))
	if err := json.Unmarshal(caddyfileJSON(t, site), &cfg); err != nil {
		t.Fatal(err)
	}
	err := caddy.Validate(&cfg)
	if err == nil {
		t.Fatal("a hash_key of 12 bytes loaded, want an error")
	}
	if !strings.Contains(err.Error(), "hash_key must be at least 16 bytes") || strings.Contains(err.Error(), "short-secret") {
		t.Errorf("loading a short hash_key: %v; want the length named, never the key", err)
	}
}

// A request without a tenant value goes to the fallback whatever its body
// says, so its body is not read: the fallback's upstream is contacted
// while the client is still uploading, and gets every byte, as with stock
// Caddy. Read first, a 2 MiB prompt without a key held a 2 MiB buffer
// and the upstream waited for the whole upload.
func TestKeylessUploadIsNotHeld(t *testing.T) {
	arrived := make(chan struct{})
	got := make(chan string, 1)
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			got <- "read error: " + err.Error()
			return
		}
		got <- digest(body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go upstream.Serve(ln)
	t.Cleanup(func() { upstream.Close() })

	port := freePort(t)
	startCaddy(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy prefix_cache {
			tenant {http.request.header.Authorization}
		}
		%s
	}
}
`, port, ln.Addr(), reasonHeaders))

	body := chat(words("keyless", 20000), "hi")
	half := len(body) / 2
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	conn.Write(body[:half])
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream was not contacted while a request without a key was still uploading: the policy read its body")
	}
	conn.Write(body[half:])
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-PC-Skip") != "no_tenant" {
		t.Errorf("status %d, skip %q; want 200, no_tenant", resp.StatusCode, resp.Header.Get("X-PC-Skip"))
	}
	if d := <-got; d != digest(body) {
		t.Errorf("the upstream got a body with digest %s, want the client's %s", d, digest(body))
	}
}
