// Package examples_test checks the Caddyfiles this repository ships
// (Caddyfile.example and examples/*.Caddyfile) for what an operator relies
// on: formatted as `caddy fmt` writes them, health checks and retries that
// survive a dead replica, no routing information in responses to clients,
// a tenant key where clients are many, and listeners where the comments
// say. failover_test.go runs Caddyfile.example in a real Caddy and kills a
// replica under it.
package examples_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/prefixcache/caddy-prefixcache/caddymodule"
	_ "github.com/prefixcache/caddy-prefixcache/edgesync/redis"
)

// shipped returns the Caddyfiles the repository ships, relative to this
// folder.
func shipped(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.Caddyfile")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example Caddyfiles: %v", err)
	}
	return append([]string{"../Caddyfile.example"}, files...)
}

// exampleEnv is the environment the structural tests adapt the examples
// with: Caddyfile.example has no default for UPSTREAMS.
var exampleEnv = map[string]string{"UPSTREAMS": "127.0.0.1:8001 127.0.0.1:8002"}

// adaptFile adapts a Caddyfile as `caddy adapt` does, with env set in the
// process environment for its {$NAME} placeholders.
func adaptFile(t *testing.T, file string, env map[string]string) map[string]any {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(raw, map[string]any{"filename": file})
	if err != nil {
		t.Fatalf("adapting %s: %v", file, err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestFormatted checks that each shipped Caddyfile is as `caddy fmt`
// writes it (caddy fmt is caddyfile.Format; `caddy fmt --diff` shows what
// to change).
func TestFormatted(t *testing.T) {
	for _, file := range shipped(t) {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if got := caddyfile.Format(raw); !bytes.Equal(got, raw) {
			t.Errorf("%s is not formatted; run: go run ./cmd/caddy fmt --overwrite %s\n%s",
				file, strings.TrimPrefix(file, "../"), lineDiff(raw, got))
		}
	}
}

// lineDiff names the first line where a and b differ.
func lineDiff(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  have %q\n  want %q", i+1, x, y)
		}
	}
	return ""
}

// walk calls fn on every JSON object under v, with the path to it.
func walk(v any, path []string, fn func(path []string, m map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		fn(path, v)
		for k, c := range v {
			walk(c, append(path, k), fn)
		}
	case []any:
		for i, c := range v {
			walk(c, append(path, fmt.Sprint(i)), fn)
		}
	}
}

// prefixCacheProxies returns the reverse_proxy handlers under cfg that use
// the prefix_cache policy (forward_auth's proxy, for one, does not).
func prefixCacheProxies(cfg map[string]any) []map[string]any {
	var out []map[string]any
	walk(cfg, nil, func(_ []string, m map[string]any) {
		if m["handler"] != "reverse_proxy" {
			return
		}
		lb, _ := m["load_balancing"].(map[string]any)
		sp, _ := lb["selection_policy"].(map[string]any)
		if sp["policy"] == "prefix_cache" {
			out = append(out, m)
		}
	})
	return out
}

// get follows keys through nested JSON objects.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// TestSurvivesDeadReplica checks that every prefix_cache proxy of every
// shipped Caddyfile has what TestFailover shows Caddyfile.example needs
// when a replica dies: active health checks on the engines' /health,
// retries after dial errors only, no lb_try_duration, and streaming; and
// no passive health checks, which clients can trip
// (TestClientsCannotMarkEnginesDown).
func TestSurvivesDeadReplica(t *testing.T) {
	for _, file := range shipped(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			proxies := prefixCacheProxies(adaptFile(t, file, exampleEnv))
			if len(proxies) == 0 {
				t.Fatalf("%s has no prefix_cache proxy", file)
			}
			for i, h := range proxies {
				if got := get(h, "health_checks", "active", "uri"); got != "/health" {
					t.Errorf("proxy %d: health_uri = %v, want /health (vLLM's and SGLang's health endpoint)", i, got)
				}
				if p := get(h, "health_checks", "passive"); p != nil {
					t.Errorf("proxy %d: passive health checks %v: Caddy counts a client's failed upload against the upstream, so clients could mark every engine down (TestClientsCannotMarkEnginesDown)", i, p)
				}
				if n, _ := get(h, "load_balancing", "retries").(float64); n < 1 {
					t.Errorf("proxy %d: lb_retries = %v, want at least 1", i, n)
				}
				if d := get(h, "load_balancing", "try_duration"); d != nil {
					t.Errorf("proxy %d: lb_try_duration = %v: its clock starts before the policy reads the body; use lb_retries", i, d)
				}
				if m := get(h, "load_balancing", "retry_match"); m != nil {
					t.Errorf("proxy %d: lb_retry_match = %v: would retry POSTs an engine may have received", i, m)
				}
				if fi := h["flush_interval"]; fi != float64(-1) {
					t.Errorf("proxy %d: flush_interval = %v, want -1 (tokens stream as produced)", i, fi)
				}
			}
		})
	}
}

// TestReadTimeouts checks that every server of every shipped Caddyfile
// cuts off uploads that stall (read_body_idle) or trickle (its minimum
// rate), and slow headers: a stalled upload holds a body buffer, and a
// trickle of a byte a second never goes idle.
func TestReadTimeouts(t *testing.T) {
	for _, file := range shipped(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			servers, _ := get(adaptFile(t, file, exampleEnv), "apps", "http", "servers").(map[string]any)
			if len(servers) == 0 {
				t.Fatalf("%s has no server", file)
			}
			for name, srv := range servers {
				if d, _ := get(srv, "read_idle_timeout").(float64); d <= 0 || time.Duration(d) > time.Minute {
					t.Errorf("server %s: read_body_idle = %v, want set, at most 1m", name, time.Duration(d))
				}
				if r, _ := get(srv, "read_min_rate").(float64); r < 1 {
					t.Errorf("server %s: read_body_idle's minimum rate = %v, want set (a trickle never goes idle)", name, r)
				}
				if d, _ := get(srv, "read_header_timeout").(float64); d <= 0 {
					t.Errorf("server %s: read_header = %v, want set", name, time.Duration(d))
				}
			}
		})
	}
}

// routingPlaceholders are the placeholders that tell how a request was
// routed: which replica, and whether another client's prefix was there.
var routingPlaceholders = []string{"{http.reverse_proxy.prefix_cache.", "{http.reverse_proxy.upstream."}

// TestNoRoutingInResponses checks that no shipped Caddyfile sends a
// routing placeholder to clients: they may go to access logs, to the
// upstream, or into response headers behind a remote_ip or client_ip
// matcher that lists more than loopback addresses (behind a tunnel or a
// reverse proxy on the same host, every client is 127.0.0.1), nowhere
// else.
func TestNoRoutingInResponses(t *testing.T) {
	for _, file := range shipped(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			checkRoutingExposure(t, adaptFile(t, file, exampleEnv))
		})
	}
}

func checkRoutingExposure(t *testing.T, cfg map[string]any) {
	t.Helper()
	// guarded[path prefix] marks routes whose every matcher set checks
	// the client's address.
	guarded := map[string]bool{}
	walk(cfg, nil, func(path []string, m map[string]any) {
		sets, _ := m["match"].([]any)
		if _, isRoute := m["handle"]; !isRoute || len(sets) == 0 {
			return
		}
		for _, s := range sets {
			set, _ := s.(map[string]any)
			if set["remote_ip"] == nil && set["client_ip"] == nil {
				return
			}
			if loopbackOnly(set) {
				// A tunnel or a reverse proxy on the same host
				// connects from loopback for all of its clients.
				return
			}
		}
		guarded[strings.Join(path, "/")+"/"] = true
	})
	isGuarded := func(path string) bool {
		for p := range guarded {
			if strings.HasPrefix(path, p) {
				return true
			}
		}
		return false
	}
	walk(cfg, nil, func(path []string, m map[string]any) {
		kind, _ := m["handler"].(string)
		if kind == "" {
			return
		}
		at := strings.Join(path, "/") + "/"
		ownStrings(m, nil, func(where, s string) {
			if !slices.ContainsFunc(routingPlaceholders, func(ph string) bool { return strings.Contains(s, ph) }) {
				return
			}
			switch {
			case kind == "log_append":
			case kind == "reverse_proxy" && strings.HasPrefix(where, "headers/request/"):
				// header_up: to the engine, not to the client
			case kind == "headers" && strings.HasPrefix(where, "response/"),
				kind == "reverse_proxy" && strings.HasPrefix(where, "headers/response/"):
				if !isGuarded(at) {
					t.Errorf("%s: %s sends %s to every client; guard it with a remote_ip matcher", at, where, s)
				}
			default:
				t.Errorf("%s: the %s handler uses %s at %s; only log_append, header_up and guarded response headers may", at, kind, s, where)
			}
		})
	})
}

// ownStrings calls fn on every string under v, with its path, except
// those of nested handlers (walk visits them on their own).
func ownStrings(v any, path []string, fn func(where, s string)) {
	switch v := v.(type) {
	case map[string]any:
		if _, nested := v["handler"]; nested && len(path) > 0 {
			return
		}
		for k, c := range v {
			ownStrings(c, append(path, k), fn)
		}
	case []any:
		for i, c := range v {
			ownStrings(c, append(path, fmt.Sprint(i)), fn)
		}
	case string:
		fn(strings.Join(path, "/"), v)
	}
}

// loopbackOnly reports whether a matcher set's remote_ip and client_ip
// ranges are all loopback addresses.
func loopbackOnly(set map[string]any) bool {
	n := 0
	for _, key := range []string{"remote_ip", "client_ip"} {
		ranges, _ := get(set, key, "ranges").([]any)
		for _, r := range ranges {
			n++
			s := fmt.Sprint(r)
			if p, err := netip.ParsePrefix(s); err == nil {
				if !p.Addr().IsLoopback() || (p.Addr().Is4() && p.Bits() < 8) {
					return false
				}
			} else if a, err := netip.ParseAddr(s); err != nil || !a.IsLoopback() {
				return false
			}
		}
	}
	return n > 0
}

// TestTenantWhereClientsAreMany checks that every shipped Caddyfile that
// serves more than one client keys the policy by tenant, with a value a
// client cannot pick freely: the Authorization header (which the engines
// must check, as the comments say), an identity from an authentication
// handler, or a header that forward_auth sets after deleting the client's
// own.
func TestTenantWhereClientsAreMany(t *testing.T) {
	singleClient := map[string]bool{"local-tls.Caddyfile": true} // loopback only
	for _, file := range shipped(t) {
		if singleClient[filepath.Base(file)] {
			continue
		}
		t.Run(filepath.Base(file), func(t *testing.T) {
			cfg := adaptFile(t, file, exampleEnv)
			deleted := map[string]bool{} // request headers a config deletes before use
			walk(cfg, nil, func(_ []string, m map[string]any) {
				if m["handler"] != "headers" {
					return
				}
				dels, _ := get(m, "request", "delete").([]any)
				for _, d := range dels {
					deleted[fmt.Sprint(d)] = true
				}
			})
			for i, h := range prefixCacheProxies(cfg) {
				tenant, _ := get(h, "load_balancing", "selection_policy", "tenant").(string)
				header, isHeader := strings.CutPrefix(strings.Trim(tenant, "{}"), "http.request.header.")
				switch {
				case tenant == "":
					t.Errorf("proxy %d: no tenant: every client shares one prefix namespace", i)
				case tenant == "{http.auth.user.id}":
				case isHeader && header == "Authorization":
				case isHeader && deleted[header]:
				default:
					t.Errorf("proxy %d: tenant %s is a value the client chooses", i, tenant)
				}
			}
		})
	}
}

// listeners returns the listen addresses of every HTTP server in cfg.
func listeners(cfg map[string]any) []string {
	var out []string
	servers, _ := get(cfg, "apps", "http", "servers").(map[string]any)
	for _, s := range servers {
		ls, _ := get(s, "listen").([]any)
		for _, l := range ls {
			out = append(out, fmt.Sprint(l))
		}
	}
	slices.Sort(out)
	return out
}

// TestBind checks that the examples listen where their comments say:
// Caddyfile.example on every interface unless BIND names some,
// local-tls.Caddyfile on loopback only. TestFailover checks the bound
// interface on a running Caddy.
func TestBind(t *testing.T) {
	tests := []struct {
		file string
		env  map[string]string
		want []string
	}{
		{"../Caddyfile.example", map[string]string{}, []string{":8080"}},
		{"../Caddyfile.example", map[string]string{"LISTEN": "127.0.0.1:8080"}, []string{":8080"}},
		{"../Caddyfile.example", map[string]string{"BIND": "127.0.0.1"}, []string{"127.0.0.1:8080"}},
		{"../Caddyfile.example", map[string]string{"BIND": "127.0.0.1 ::1", "LISTEN": ":9000"}, []string{"127.0.0.1:9000", "[::1]:9000"}},
		{"local-tls.Caddyfile", map[string]string{}, []string{"127.0.0.1:8443"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %v", tt.file, tt.env), func(t *testing.T) {
			env := map[string]string{"UPSTREAMS": "127.0.0.1:1"}
			for k, v := range tt.env {
				env[k] = v
			}
			if got := listeners(adaptFile(t, tt.file, env)); !slices.Equal(got, tt.want) {
				t.Errorf("%s with %v listens on %v, want %v", tt.file, tt.env, got, tt.want)
			}
		})
	}
}

// TestLocalTLSLeavesTrustStore checks that local-tls.Caddyfile does not
// install Caddy's root certificate into the system trust store (which
// Caddy does by default when it runs as root); `caddy trust` opts in.
func TestLocalTLSLeavesTrustStore(t *testing.T) {
	cfg := adaptFile(t, "local-tls.Caddyfile", nil)
	if got := get(cfg, "apps", "pki", "certificate_authorities", "local", "install_trust"); got != false {
		t.Errorf("local-tls.Caddyfile: pki local install_trust = %v, want false (skip_install_trust)", got)
	}
}

// TestREADMEExample checks that the README's example Caddyfile (the first
// caddy block of its Examples section) adapts to the reverse_proxy handler
// of the JSON block that follows it, and that it has what
// TestSurvivesDeadReplica asks of the shipped files.
func TestREADMEExample(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	i := strings.Index(s, "\n## Examples\n")
	if i < 0 {
		t.Fatal("README has no Examples section")
	}
	s = s[i:]
	block := func(lang string) string {
		start := strings.Index(s, "```"+lang+"\n")
		if start < 0 {
			t.Fatalf("no %s block in the README's Examples section", lang)
		}
		start += len(lang) + 4
		end := strings.Index(s[start:], "```")
		return s[start : start+end]
	}
	caddyBlock, jsonBlock := block("caddy"), block("json")
	if got := caddyfile.Format([]byte(caddyBlock)); string(got) != caddyBlock {
		t.Errorf("the README's example Caddyfile is not formatted:\n%s", lineDiff([]byte(caddyBlock), got))
	}
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyBlock), map[string]any{"filename": "README.md"})
	if err != nil {
		t.Fatalf("adapting the README's example: %v", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	proxies := prefixCacheProxies(cfg)
	if len(proxies) != 1 {
		t.Fatalf("the README's example has %d prefix_cache proxies, want 1", len(proxies))
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(jsonBlock), &want); err != nil {
		t.Fatalf("the README's JSON example: %v", err)
	}
	if p := get(proxies[0], "health_checks", "passive"); p != nil {
		t.Errorf("the README's example has passive health checks %v, which clients can trip (TestClientsCannotMarkEnginesDown)", p)
	}
	got, _ := json.Marshal(proxies[0])
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(got, wantJSON) {
		t.Errorf("the README's Caddyfile adapts to\n%s\nbut its JSON says\n%s", got, wantJSON)
	}
	checkRoutingExposure(t, cfg)
}
