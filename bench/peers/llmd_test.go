package peers

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func TestLLMDSelectFollowsPrefix(t *testing.T) {
	s := new(LLMDSelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	pool := testPool(3)
	system := strings.Repeat("Shared instructions for the support bot. ", 30)
	first := s.Select(pool, chatRequest(system, "question one"), nil)
	for _, q := range []string{"question two", "question three"} {
		if got := s.Select(pool, chatRequest(system, q), nil); got != first {
			t.Errorf("Select(%s) = %s, want %s, which holds the system prompt's blocks", q, got.Dial, first.Dial)
		}
	}
}

// TestLLMDAutoTune checks that the peer sizes each server's LRU from the
// engine's vllm:cache_config_info, as makeserver does with AutoTune on
// (the default), and keeps GIE's 31,250 with it off.
func TestLLMDAutoTune(t *testing.T) {
	_, up := engineUpstream(t, 2500)
	off := false
	tests := []struct {
		name     string
		autoTune *bool
		want     int
	}{
		{"AutoTune (default): the engine's num_gpu_blocks", nil, 2500},
		{"AutoTune off: GIE's default", &off, LLMDLRUCapacityPerServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &LLMDSelection{AutoTune: tt.autoTune}
			if err := s.Provision(newTestContext(t)); err != nil {
				t.Fatal(err)
			}
			pool := reverseproxy.UpstreamPool{up}
			s.Select(pool, chatRequest(strings.Repeat("Shared instructions. ", 30), "q"), nil)
			s.mu.Lock()
			got := s.index.capacity(s.ids.id(up.Dial))
			s.mu.Unlock()
			if got != tt.want {
				t.Errorf("LRU capacity %d, want %d", got, tt.want)
			}
		})
	}
}

// TestLLMDWeightsRefused: a negative weight, or every scorer dropped,
// is an error (TestProcedureVariantsChangeOneKnob checks that each
// weight set alone keeps the others at their defaults).
func TestLLMDWeightsRefused(t *testing.T) {
	for config, want := range map[string]string{
		`{"prefix_weight":0,"queue_weight":0,"kv_cache_weight":0}`: "at least one",
		`{"queue_weight":-1}`: "must not be negative",
	} {
		s := new(LLMDSelection)
		if err := json.Unmarshal([]byte(config), s); err != nil {
			t.Fatal(err)
		}
		if err := s.Provision(newTestContext(t)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Provision = %v, want an error containing %q", config, err, want)
		}
	}
}
