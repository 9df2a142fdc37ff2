package caddymodule_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/caddymodule"
)

// The model matcher sends each model to its own pool in a real Caddy,
// with the pool's prefix_cache policy routing on the same body read
// (conversations keep their affinity within the pool), the body arriving
// byte for byte, and a body it cannot read or that names no model going
// to the routes after.
func TestModelMatcherRoutesByModel(t *testing.T) {
	big, small, other := newBackends(t, 2), newBackends(t, 2), newBackend(t, "default")
	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	@big prefix_cache_model meta-llama/Llama-3.1-70B* llama-3.1-70b*
	handle @big {
		reverse_proxy %s %s {
			lb_policy prefix_cache
			header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}
		}
	}
	@small prefix_cache_model qwen*
	handle @small {
		reverse_proxy %s %s {
			lb_policy prefix_cache
			header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}
		}
	}
	handle {
		reverse_proxy %s
	}
}
`, port, big[0].addr(), big[1].addr(), small[0].addr(), small[1].addr(), other.addr()))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	pool := func(b string) string {
		for _, x := range big {
			if x.name == b {
				return "big"
			}
		}
		return map[string]string{small[0].name: "small", small[1].name: "small", other.name: "default"}[b]
	}
	// Backends of different pools must have different names.
	for i, b := range small {
		b.name = fmt.Sprintf("s%d", i)
	}
	body := func(model, turn string) []byte {
		return []byte(fmt.Sprintf(`{"messages":[{"role":"system","content":%q},{"role":"user","content":%q}],"model":%q}`, words("model-system", 300), turn, model))
	}
	before := scrape(t, admin, "caddy_prefix_cache_body_peeks_total")
	for _, tt := range []struct {
		name, model, ctype, want string
	}{
		{"a big model", "llama-3.1-70b-instruct", "application/json", "big"},
		{"a big model by its hub name", "meta-llama/Llama-3.1-70B-Instruct", "application/json", "big"},
		{"a small model", "qwen2.5-7b", "application/json", "small"},
		{"another model", "mistral-7b", "application/json", "default"},
		{"no JSON content type", "llama-3.1-70b", "text/html", "default"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := body(tt.model, "first")
			resp, err := http.Post(url, tt.ctype, bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got := resp.Header.Get("X-Backend")
			if pool(got) != tt.want {
				t.Errorf("model %q (%s) went to %s, in pool %q; want pool %q", tt.model, tt.ctype, got, pool(got), tt.want)
			}
			for _, x := range append(append(big, small...), other) {
				if x.name != got {
					continue
				}
				if r := x.requests(); r[len(r)-1].digest != digest(b) {
					t.Errorf("the upstream received %d bytes, not the client's %d", r[len(r)-1].size, len(b))
				}
			}
		})
	}
	// Within a pool the policy routes on the matcher's read: the second
	// turn of a conversation is a match.
	first := body("qwen2.5-7b", "a conversation")
	resp, _ := http.Post(url, "application/json", bytes.NewReader(first))
	resp.Body.Close()
	second := []byte(fmt.Sprintf(`{"messages":[{"role":"system","content":%q},{"role":"user","content":"a conversation"},{"role":"assistant","content":"yes"},{"role":"user","content":"next"}],"model":"qwen2.5-7b"}`, words("model-system", 300)))
	resp, _ = http.Post(url, "application/json", bytes.NewReader(second))
	resp.Body.Close()
	if got := resp.Header.Get("X-PC-Reason"); got != "match" {
		t.Errorf("second turn in the small pool: reason %q, want match", got)
	}
	after := scrape(t, admin, "caddy_prefix_cache_body_peeks_total")
	key := `caddy_prefix_cache_body_peeks_total{outcome="routed"}`
	if got := after[key] - before[key]; got != 5 {
		t.Errorf("%s rose by %v, want 5: the three pooled requests and the conversation's two turns, each read once", key, got)
	}
}

// The model matcher's JSON is a list of patterns, as it always was, or an
// object when it fails open; both forms read back as they were written.
func TestModelMatcherJSON(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     caddymodule.MatchModel
	}{
		{"list", `["llama*","qwen*"]`, caddymodule.MatchModel{Patterns: []string{"llama*", "qwen*"}}},
		{"object", `{"patterns":["llama*"],"fail_open":true}`, caddymodule.MatchModel{Patterns: []string{"llama*"}, FailOpen: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var m caddymodule.MatchModel
			if err := json.Unmarshal([]byte(tt.in), &m); err != nil || !reflect.DeepEqual(m, tt.want) {
				t.Fatalf("json.Unmarshal(%s) = %+v, %v; want %+v", tt.in, m, err, tt.want)
			}
			out, err := json.Marshal(m)
			if err != nil || string(out) != tt.in {
				t.Errorf("json.Marshal(%+v) = %s, %v; want %s", m, out, err, tt.in)
			}
		})
	}
}
