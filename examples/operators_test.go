package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// operatorLines are the commented-out lines of Caddyfile.example that
// send the routing headers to operators only.
var operatorLines = regexp.MustCompile(`(?m)^(\t+)# ((?:@operators|header @operators) .*)$`)

// TestOperatorHeaders uncomments the operator lines of Caddyfile.example,
// as its comment says to, and checks that a client from an operator's
// address (127.0.0.1) gets the routing headers and any other (127.0.0.2)
// gets neither.
func TestOperatorHeaders(t *testing.T) {
	src := readExample(t)
	if n := len(operatorLines.FindAll(src, -1)); n != 3 {
		t.Fatalf("Caddyfile.example has %d commented operator lines, want 3 (the matcher and two headers)", n)
	}
	src = operatorLines.ReplaceAll(src, []byte("$1$2"))

	e := startEngine(t, "e0")
	url, _, _ := runExample(t, src, []string{e.addr})

	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
		}}
	}
	tests := []struct {
		from     string
		upstream string // want X-Upstream
		reason   bool   // want an X-Prefix-Cache reason
	}{
		{"127.0.0.1", e.addr, true},
		{"127.0.0.2", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.from, func(t *testing.T) {
			c := newConversation(0)
			for _, o := range c.turn(from(tt.from), url) {
				if o.err != nil {
					t.Fatalf("request from %s: %v", tt.from, o.err)
				}
				if got := o.header.Get("X-Upstream"); got != tt.upstream {
					t.Errorf("from %s: X-Upstream = %q, want %q", tt.from, got, tt.upstream)
				}
				reason := o.header.Get("X-Prefix-Cache")
				if tt.reason && (reason == "" || strings.Contains(reason, "{")) {
					t.Errorf("from %s: X-Prefix-Cache = %q, want a routing reason", tt.from, reason)
				}
				if !tt.reason && reason != "" {
					t.Errorf("from %s: X-Prefix-Cache = %q, want none", tt.from, reason)
				}
			}
		})
	}
}

// TestUnsetUpstreams checks what Caddyfile.example's comment says of a
// `caddy run` or `caddy reload` without UPSTREAMS in its environment: the
// config fails to load, saying why, instead of answering every request
// with 503 or going to some default address.
func TestUnsetUpstreams(t *testing.T) {
	if old, ok := os.LookupEnv("UPSTREAMS"); ok {
		os.Unsetenv("UPSTREAMS")
		t.Cleanup(func() { os.Setenv("UPSTREAMS", old) })
	}
	src := readExample(t)
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&cfg); err == nil || !strings.Contains(err.Error(), "no upstreams") {
		t.Errorf("validating Caddyfile.example without UPSTREAMS: %v, want an error saying there are no upstreams", err)
	}
}

// TestExampleTenantLog checks what Caddyfile.example says of clients
// without a key: their requests go to the fallback policy, and the
// access log says why (prefix_cache_skip no_tenant), beside the routed
// requests of a client with one.
func TestExampleTenantLog(t *testing.T) {
	src := readExample(t)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	src, n := bytes.CutSuffix(bytes.TrimSpace(src), []byte("\tlog\n}"))
	if !n {
		t.Fatal("Caddyfile.example's site block no longer ends with its log directive")
	}
	src = append(src, fmt.Sprintf("\tlog {\n\t\toutput file %s\n\t\tformat json\n\t}\n}\n", accessLog)...)

	e := startEngine(t, "e0")
	url, _, _ := runExample(t, src, []string{e.addr})
	client := &http.Client{Timeout: 10 * time.Second}
	keyed, keyless := newConversation(0), newConversation(1)
	keyless.key = ""
	for _, c := range []*conversation{keyed, keyless} {
		for _, o := range c.turn(client, url) {
			if o.err != nil {
				t.Fatalf("conversation %s: %v", c.id, o.err)
			}
		}
	}
	var got []string
	poll(t, 10*time.Second, "two access log lines", func() bool {
		raw, _ := os.ReadFile(accessLog)
		got = strings.Split(strings.TrimSpace(string(raw)), "\n")
		return len(got) >= 2
	})
	var routed, skipped int
	for i, l := range got {
		var line map[string]any
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("access log line %d: %v", i, err)
		}
		reason, _ := line["prefix_cache_reason"].(string)
		skip, _ := line["prefix_cache_skip"].(string)
		switch {
		case reason == "fallback" && skip == "no_tenant":
			skipped++
		case reason != "fallback" && reason != "" && skip == "":
			routed++
		default:
			t.Errorf("access log line %d: reason %q, skip %q; want a routing reason, or fallback for no_tenant", i, reason, skip)
		}
	}
	if routed != 1 || skipped != 1 {
		t.Errorf("%d requests routed and %d sent to the fallback for no_tenant, want 1 and 1 (the keyed and the keyless client)", routed, skipped)
	}
}
