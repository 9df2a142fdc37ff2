package driver

import (
	"encoding/json"
	"testing"
)

func TestPeerPolicies(t *testing.T) {
	ps, err := ParsePolicies("peer_dynamo,peer_dynamo_approx,peer_sglang")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false} {
		if ps[i].KVEvents != want {
			t.Errorf("%s: KVEvents %v, want %v", ps[i].Name, ps[i].KVEvents, want)
		}
	}
	custom, err := ParseCustomPolicy(`dyn_w2={"policy":"peer_dynamo","prefill_load_scale":2}`)
	if err != nil || !custom.KVEvents {
		t.Errorf("custom peer_dynamo = %+v, %v, want KVEvents", custom, err)
	}
	if _, err := ParsePolicies("peer_nonesuch"); err == nil {
		t.Errorf("ParsePolicies(peer_nonesuch) = nil error")
	}
}

// TestAdaptCaddyfileScalesPeerTimes checks that every peer policy runs in
// the engines' simulated time unless it sets its own time_scale.
func TestAdaptCaddyfileScalesPeerTimes(t *testing.T) {
	caddyfile := []byte("{$LISTEN} {\n\treverse_proxy {$UPSTREAMS}\n}\n")
	own, err := ParseCustomPolicy(`s={"policy":"peer_sglang","time_scale":1}`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		p    Policy
		want any
	}{
		{"peer default", knownPolicies["peer_dynamo_approx"], 0.2},
		{"peer with its own", own, 1.0},
		{"not a peer", knownPolicies["round_robin"], nil},
		{"a peer without periods", knownPolicies["peer_kubeai"], nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := AdaptCaddyfile(caddyfile, map[string]string{"LISTEN": "127.0.0.1:9", "UPSTREAMS": "127.0.0.1:1"}, tt.p, 0.2)
			if err != nil {
				t.Fatal(err)
			}
			var got any
			var find func(v any)
			find = func(v any) {
				switch v := v.(type) {
				case map[string]any:
					if sp, ok := v["selection_policy"].(map[string]any); ok {
						got = sp["time_scale"]
					}
					for _, c := range v {
						find(c)
					}
				case []any:
					for _, c := range v {
						find(c)
					}
				}
			}
			var cfg any
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			find(cfg)
			if got != tt.want {
				t.Errorf("time_scale = %v, want %v", got, tt.want)
			}
		})
	}
}
