package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// A reverse_proxy with prefix_cache and no upstreams, static or dynamic,
// would answer every request with an empty 503: loading it fails, so
// `caddy validate` says why and a reload to it leaves the running config
// serving.
func TestEmptyUpstreamsRefused(t *testing.T) {
	b := newBackend(t, "a")
	port := freePort(t)
	cfg := func(upstreams string) []byte {
		return []byte(fmt.Sprintf(`{
	"admin": {"disabled": true, "config": {"persist": false}},
	"logging": {"logs": {"default": {"level": "ERROR"}}},
	"apps": {"http": {"servers": {"s": {
		"listen": ["127.0.0.1:%d"],
		"automatic_https": {"disable": true},
		"routes": [{"handle": [{
			"handler": "reverse_proxy",
			%s
			"load_balancing": {"selection_policy": {"policy": "prefix_cache"}}
		}]}]
	}}}}
}`, port, upstreams))
	}
	if err := caddy.Load(cfg(fmt.Sprintf(`"upstreams": [{"dial": %q}],`, b.addr())), true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping Caddy: %v", err)
		}
	})
	for _, empty := range []string{`"upstreams": [],`, ``} {
		err := caddy.Load(cfg(empty), true)
		if err == nil {
			t.Fatalf("loading a reverse_proxy with {%s} and no dynamic upstreams succeeded, want an error", empty)
		}
		if !strings.Contains(err.Error(), "no upstreams") {
			t.Errorf("loading {%s}: error %q does not say there are no upstreams", empty, err)
		}
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	if got, _ := post(t, http.DefaultClient, url, chat("sys", "hello")); got != "a" {
		t.Errorf("after the refused reloads, backend %q answered, want a", got)
	}
}

// A Caddyfile reverse_proxy with no upstream fails `caddy validate`.
func TestEmptyUpstreamsCaddyfileRefused(t *testing.T) {
	in := ":8080 {\n\treverse_proxy {\n\t\tlb_policy prefix_cache\n\t}\n}\n"
	cfgJSON := caddyfileJSON(t, in)
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	err := caddy.Validate(&cfg)
	if err == nil || !strings.Contains(err.Error(), "no upstreams") {
		t.Errorf("validating a reverse_proxy without upstreams: %v, want an error saying there are no upstreams", err)
	}
}
