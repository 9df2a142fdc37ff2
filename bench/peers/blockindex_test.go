package peers

import (
	"slices"
	"strings"
	"testing"
)

// TestGIEHashPrompt replays the hashing cases of llm-d's approximate
// prefix producer tests (llm-d/llm-d-inference-scheduler at 520af478,
// pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/
// plugin_test.go): with 1-token blocks (4 characters), "aaaaaa" gives 2
// hashes (a full block and the partial tail; TestPrefixPluginCompletion),
// "aaaabbbb" 2; 128 characters at AutoTune's 16-token blocks give 2
// (TestPrefixPluginAutoTune); 16 characters cut to 3 blocks give 3
// (TestMaxPrefixTokensToMatch's fallback to MaxPrefixBlocksToMatch).
func TestGIEHashPrompt(t *testing.T) {
	tests := []struct {
		name       string
		input      string
		blockChars int
		maxBlocks  int
		want       int
	}{
		{"full block and partial tail", "aaaaaa", 4, 256, 2},
		{"two full blocks", "aaaabbbb", 4, 256, 2},
		{"AutoTune: 16 tokens x 4 characters", strings.Repeat("a", 128), 64, 256, 2},
		{"cut to MaxPrefixBlocksToMatch", "aaaabbbbccccdddd", 4, 3, 3},
		{"shorter than a block", "aaa", 4, 256, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gieHashPrompt(nil, "test-model1", "", []byte(tt.input), tt.blockChars, tt.maxBlocks); len(got) != tt.want {
				t.Errorf("len(gieHashPrompt(%q, %d chars, max %d)) = %d, want %d", tt.input, tt.blockChars, tt.maxBlocks, len(got), tt.want)
			}
		})
	}

	// The chain: "aaaabbbb" shares its first hash with "aaaaaa", not its
	// second (the partial "aa" and the full "bbbb" differ); the model and
	// the salt seed it.
	a := gieHashPrompt(nil, "m", "", []byte("aaaaaa"), 4, 256)
	b := gieHashPrompt(nil, "m", "", []byte("aaaabbbb"), 4, 256)
	if a[0] != b[0] || a[1] == b[1] {
		t.Errorf("hashes %x and %x: want the first equal and the second different", a, b)
	}
	if c := gieHashPrompt(nil, "other", "", []byte("aaaaaa"), 4, 256); c[0] == a[0] {
		t.Errorf("the model does not seed the chain")
	}
	if c := gieHashPrompt(nil, "m", "salt", []byte("aaaaaa"), 4, 256); c[0] == a[0] {
		t.Errorf("the cache salt does not seed the chain")
	}
}

// TestGIEUpstreamCompletion replays TestPrefixPluginCompletion: "aaaaaa"
// routed to pod1, then "aaaabbbb" matches one block of two on pod1 and
// none on pod2.
func TestGIEUpstreamCompletion(t *testing.T) {
	x := newBlockIndexer(LLMDLRUCapacityPerServer)
	x.add(gieHashPrompt(nil, "test-model1", "", []byte("aaaaaa"), 4, 256), 1, 0)
	hashes := gieHashPrompt(nil, "test-model1", "", []byte("aaaabbbb"), 4, 256)
	got := x.matchLongestPrefix(hashes)
	if len(hashes) != 2 || got[1] != 1 || got[2] != 0 {
		t.Errorf("total %d, pod1 %d, pod2 %d; want 2, 1, 0 (upstream)", len(hashes), got[1], got[2])
	}
}

func TestLLMDScores(t *testing.T) {
	w := llmdWeights{prefix: 3, queue: 2, kv: 2}
	tests := []struct {
		name  string
		total int
		cands []llmdCandidate
		want  []float64
	}{
		{"idle, no prefix", 4, []llmdCandidate{{}, {}}, []float64{4, 4}},
		{"prefix share", 4, []llmdCandidate{{matched: 4}, {matched: 1}}, []float64{7, 4.75}},
		{"queue min-max", 4, []llmdCandidate{{waiting: 10}, {waiting: 0}, {waiting: 5}}, []float64{2, 4, 3}},
		{"kv usage", 4, []llmdCandidate{{kvUsage: 1}, {kvUsage: 0.5}}, []float64{2, 3}},
		{"prompt shorter than a block", 0, []llmdCandidate{{matched: 0}}, []float64{4}},
		{"prefix beats a deep queue", 4, []llmdCandidate{{matched: 4, waiting: 30}, {waiting: 0}}, []float64{5, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := llmdScores(w, tt.total, tt.cands); !slices.Equal(got, tt.want) {
				t.Errorf("llmdScores(%v) = %v, want %v", tt.cands, got, tt.want)
			}
		})
	}
}

func TestMaxScoreTies(t *testing.T) {
	scores := []float64{1, 3, 2, 3}
	// intn always 0: each new tie replaces the best (reservoir sampling).
	if got := maxScore(scores, func(int) int { return 0 }); got != 3 {
		t.Errorf("maxScore(%v, always replace) = %d, want 3", scores, got)
	}
	if got := maxScore(scores, func(n int) int { return n - 1 }); got != 1 {
		t.Errorf("maxScore(%v, never replace) = %d, want 1", scores, got)
	}
}
