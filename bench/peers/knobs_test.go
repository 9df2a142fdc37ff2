package peers

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// procedurePeers makes each peer of the tuning procedure and reads its
// knobs' values once provisioned, by the knob names of
// bench/scoring/sets.sh.
var procedurePeers = map[string]struct {
	new   func() caddy.Provisioner
	knobs func(caddy.Provisioner) map[string]float64
}{
	"peer_sglang": {func() caddy.Provisioner { return new(SGLangSelection) }, func(m caddy.Provisioner) map[string]float64 {
		p := m.(*SGLangSelection).policy
		return map[string]float64{"cache_threshold": p.cacheThreshold, "balance_abs_threshold": float64(p.absThreshold), "balance_rel_threshold": p.relThreshold}
	}},
	"peer_llmd": {func() caddy.Provisioner { return new(LLMDSelection) }, func(m caddy.Provisioner) map[string]float64 {
		w := m.(*LLMDSelection).weights
		return map[string]float64{"prefix_weight": w.prefix, "queue_weight": w.queue, "kv_cache_weight": w.kv}
	}},
	"peer_kubeai": {func() caddy.Provisioner { return new(KubeAISelection) }, func(m caddy.Provisioner) map[string]float64 {
		s := m.(*KubeAISelection)
		return map[string]float64{"mean_load_factor": s.MeanLoadFactor, "prefix_char_length": float64(s.PrefixCharLength)}
	}},
	"peer_vllmstack": {func() caddy.Provisioner { return new(VLLMStackSelection) }, func(m caddy.Provisioner) map[string]float64 {
		s := m.(*VLLMStackSelection)
		return map[string]float64{"chunk_size": float64(s.ChunkSize), "match_threshold": float64(s.MatchThreshold)}
	}},
	"peer_dynamo": {func() caddy.Provisioner { return new(DynamoSelection) }, func(m caddy.Provisioner) map[string]float64 {
		w := m.(*DynamoSelection).weights
		return map[string]float64{"prefill_load_scale": w.prefillLoadScale, "overlap_score_credit": w.overlapCredit}
	}},
	"peer_dynamo_approx": {func() caddy.Provisioner { return new(DynamoApproxSelection) }, func(m caddy.Provisioner) map[string]float64 {
		w := m.(*DynamoApproxSelection).weights
		return map[string]float64{"prefill_load_scale": w.prefillLoadScale, "overlap_score_credit": w.overlapCredit}
	}},
}

// TestProcedureVariantsChangeOneKnob provisions every peer variant the
// tuning procedure runs (bench/scoring/sets.sh PROCEDURE_KNOBS: each
// listed value, and each bound, which an extension can reach) from the
// JSON the procedure writes, and checks that the variant's knob has its
// value and every other knob its default: a variant that moves two
// knobs, or reads a value as unset, tunes another router than it names.
func TestProcedureVariantsChangeOneKnob(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	script := `set -euo pipefail; source ./sets.sh
for e in "${PROCEDURE_KNOBS[@]}"; do
	IFS='|' read -r r k d vs b <<<"$e"
	[[ $r == peer_* ]] || continue
	echo "$r|default|0|$(spec_json "$r")"
	for v in $vs ${b//,/ }; do echo "$r|$k|$v|$(spec_json "$r" "$k=$(knob_json "$b" "$v")")"; done
done`
	cmd := exec.Command(bash, "-c", script)
	cmd.Dir = "../scoring"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	provision := func(router, config string) map[string]float64 {
		t.Helper()
		p, ok := procedurePeers[router]
		if !ok {
			t.Fatalf("%s: a router of PROCEDURE_KNOBS this test does not know", router)
		}
		m := p.new()
		if err := json.Unmarshal([]byte(config), m); err != nil {
			t.Fatalf("%s: %v", config, err)
		}
		if err := m.Provision(newTestContext(t)); err != nil {
			t.Fatalf("%s: %v", config, err)
		}
		return p.knobs(m)
	}
	defaults := map[string]map[string]float64{}
	variants := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 4)
		router, knob, config := f[0], f[1], f[3]
		got := provision(router, config)
		if knob == "default" {
			defaults[router] = got
			continue
		}
		want, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			t.Fatalf("%s: value %q", line, f[2])
		}
		def := defaults[router]
		if _, ok := def[knob]; !ok {
			t.Errorf("%s: knob %s is not among the peer's %v", router, knob, def)
			continue
		}
		for k, v := range got {
			switch {
			case k == knob && v != want:
				t.Errorf("%s: %s = %v, want %v", config, k, v, want)
			case k != knob && v != def[k]:
				t.Errorf("%s: %s = %v, want its default %v", config, k, v, def[k])
			}
		}
		variants++
	}
	if variants == 0 {
		t.Fatalf("no peer variant in PROCEDURE_KNOBS:\n%s", out)
	}
}
