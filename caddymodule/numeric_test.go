package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// Every numeric option refuses NaN, the infinities and values out of its
// range where it is read: a Caddyfile value fails `caddy adapt` with the
// option's name (a NaN that reached Caddy's lb_policy parsing would be
// dropped with the whole policy, silently, when Caddy marshals it), and a
// JSON value fails `caddy validate`.
func TestNumericOptionsRefuseBadValues(t *testing.T) {
	bad := map[string][]string{
		"chunk_size":           {"NaN", "Inf", "0", "-1", "1.5", "99999999999999999999", "1099511627777"},
		"max_chunks":           {"NaN", "Inf", "0", "-1"},
		"max_entries":          {"NaN", "Inf", "0", "-1", "17179869184"},
		"min_match":            {"NaN", "Inf", "0", "-1", "1099511627777"},
		"min_match_ratio":      {"NaN", "Inf", "-Inf", "-0.1", "1.5"},
		"tenant_share":         {"NaN", "Inf", "-0.1", "1.5"},
		"max_body":             {"NaN", "Inf", "-1", "0", "2TiB"},
		"body_budget":          {"NaN", "Inf", "-1", "0", "2TiB"},
		"load_factor":          {"NaN", "nan", "Inf", "+Inf", "-Inf", "Infinity", "1e400", "0.5", "-1"},
		"cold_load_factor":     {"NaN", "Inf", "-Inf", "0.5", "1e400"},
		"load_allowance":       {"NaN", "Inf", "-1", "1.5", "99999999999999999999"},
		"load_allowance_bytes": {"NaN", "Inf", "-1", "2TiB"},
		"prefill_rate":         {"NaN", "Inf", "-1", "2TiB"},
		"forget_after":         {"NaN", "Inf", "0", "1ns", "9000h"},
		"sync_load_interval":   {"NaN", "Inf", "0", "1ns", "1m"},
	}
	engine := map[string][]string{
		"port":            {"NaN", "Inf", "0", "-1", "65536"},
		"interval":        {"NaN", "Inf", "0", "-1s", "1ms"},
		"timeout":         {"NaN", "Inf", "0", "-1s"},
		"bytes_per_token": {"NaN", "Inf", "-Inf", "0", "0.1", "65"},
	}
	var cases []struct{ name, block string }
	for opt, vals := range bad {
		for _, v := range vals {
			cases = append(cases, struct{ name, block string }{opt, opt + " " + v})
		}
	}
	for opt, vals := range engine {
		for _, v := range vals {
			cases = append(cases, struct{ name, block string }{opt, "engine_metrics {\n\t\t\t\t" + opt + " " + v + "\n\t\t\t}"})
		}
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.block, "\n", " "), func(t *testing.T) {
			in := fmt.Sprintf(":8080 {\n\treverse_proxy 127.0.0.1:8001 {\n\t\tlb_policy prefix_cache {\n\t\t\t%s\n\t\t}\n\t}\n}\n", c.block)
			out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(in), map[string]any{"filename": "Caddyfile"})
			if err == nil {
				t.Fatalf("adapting %q succeeded, want an error naming %s; got:\n%s", c.block, c.name, out)
			}
			if !strings.Contains(err.Error(), c.name) {
				t.Errorf("adapting %q: error %q does not name %s", c.block, err, c.name)
			}
		})
	}
}

// TestNumericJSONRefusesBadValues holds the JSON config to the same
// ranges: what the Caddyfile refuses, Validate refuses.
func TestNumericJSONRefusesBadValues(t *testing.T) {
	tests := []struct {
		field, policy string
	}{
		{"chunk_size", `"chunk_size": -1`},
		{"chunk_size", `"chunk_size": 1099511627777`},
		{"max_chunks", `"max_chunks": -1`},
		{"max_entries", `"max_entries": -1`},
		{"max_entries", `"max_entries": 17179869184`},
		{"min_match", `"min_match": -1`},
		{"min_match", `"min_match": 9223372036854775807`},
		{"min_match_ratio", `"min_match_ratio": 1.5`},
		{"tenant_share", `"tenant_share": -0.1`},
		{"max_body", `"max_body": -1`},
		{"max_body", `"max_body": 1099511627777`},
		{"body_budget", `"body_budget": -1`},
		{"load_factor", `"load_factor": 0.5`},
		{"load_factor", `"load_factor": -1`},
		{"", `"load_factor": 1e400`}, // encoding/json refuses it, naming no field
		{"cold_load_factor", `"cold_load_factor": 0.5`},
		{"cold_load_factor", `"cold_load_factor": 3`},
		{"load_allowance", `"load_allowance": -1`},
		{"load_allowance_bytes", `"load_allowance_bytes": -1`},
		{"prefill_rate", `"prefill_rate": -1`},
		{"prefill_rate", `"prefill_rate": 1099511627777`},
		{"forget_after", `"forget_after": 1`},
		{"forget_after", `"forget_after": "9000h"`},
		{"sync_load_interval", `"sync_load_interval": "1m"`},
		{"port", `"engine_metrics": {"port": 65536}`},
		{"port", `"engine_metrics": {"port": -1}`},
		{"interval", `"engine_metrics": {"interval": "1ms"}`},
		{"timeout", `"engine_metrics": {"interval": "1s", "timeout": "2s"}`},
		{"bytes_per_token", `"engine_metrics": {"bytes_per_token": 65}`},
		{"bytes_per_token", `"engine_metrics": {"bytes_per_token": -1}`},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			cfg := fmt.Sprintf(`{"admin": {"disabled": true}, "apps": {"http": {"servers": {"srv0": {"listen": ["127.0.0.1:0"], "routes": [{"handle": [{
				"handler": "reverse_proxy",
				"upstreams": [{"dial": "127.0.0.1:8001"}],
				"load_balancing": {"selection_policy": {"policy": "prefix_cache", %s}}
			}]}]}}}}}`, tt.policy)
			var c caddy.Config
			err := json.Unmarshal([]byte(cfg), &c)
			if err == nil {
				err = caddy.Validate(&c)
			}
			if err == nil {
				t.Fatalf("validating {%s} succeeded, want an error naming %s", tt.policy, tt.field)
			}
			if tt.field != "" && !strings.Contains(err.Error(), tt.field) {
				t.Errorf("validating {%s}: error %q does not name %s", tt.policy, err, tt.field)
			}
		})
	}
}
