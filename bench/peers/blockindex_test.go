package peers

import (
	"slices"
	"strings"
	"testing"
)

func TestHashBlocks(t *testing.T) {
	text := []byte(strings.Repeat("0123456789abcdef", 20)) // 320 bytes
	tests := []struct {
		name      string
		text      []byte
		block     int
		maxBlocks int
		want      int
	}{
		{"shorter than a block", text[:63], 64, 256, 0},
		{"one block", text[:64], 64, 256, 1},
		{"partial tail ignored", text[:130], 64, 256, 2},
		{"capped", text, 64, 3, 3},
		{"all", text, 64, 256, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hashBlocks(nil, "m", tt.text, tt.block, tt.maxBlocks); len(got) != tt.want {
				t.Errorf("len(hashBlocks(%d bytes, block %d, max %d)) = %d, want %d", len(tt.text), tt.block, tt.maxBlocks, len(got), tt.want)
			}
		})
	}

	all := hashBlocks(nil, "m", text, 64, 256)
	if head := hashBlocks(nil, "m", text[:200], 64, 256); !slices.Equal(head, all[:3]) {
		t.Errorf("hashes of a prefix %x are not a prefix of the text's %x", head, all)
	}
	if other := hashBlocks(nil, "other-model", text, 64, 256); other[0] == all[0] {
		t.Errorf("the model does not seed the chain: both start with %x", all[0])
	}
	changed := slices.Clone(text)
	changed[0] = 'X'
	if got := hashBlocks(nil, "m", changed, 64, 256); got[4] == all[4] {
		t.Errorf("changing block 0 left block 4's hash %x unchanged: the chain is broken", got[4])
	}
}

func TestBlockIndexer(t *testing.T) {
	x := newBlockIndexer(3)
	x.add([]uint64{1, 2, 3}, 0)
	x.add([]uint64{1, 2, 9}, 1)
	tests := []struct {
		name   string
		hashes []uint64
		want   map[int]int
	}{
		{"both share the first two", []uint64{1, 2, 3}, map[int]int{0: 3, 1: 2}},
		{"greedy walk stops at an unknown hash", []uint64{1, 7, 3}, map[int]int{0: 1, 1: 1}},
		{"nothing", []uint64{5}, map[int]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := x.matchLongestPrefix(tt.hashes)
			if len(got) != len(tt.want) {
				t.Fatalf("matchLongestPrefix(%v) = %v, want %v", tt.hashes, got, tt.want)
			}
			for pod, n := range tt.want {
				if got[pod] != n {
					t.Errorf("matchLongestPrefix(%v)[%d] = %d, want %d", tt.hashes, pod, got[pod], n)
				}
			}
		})
	}

	// Pod 0's LRU holds 3: adding 4 evicts 1, its least recently added,
	// from the reverse map too.
	x.add([]uint64{4}, 0)
	if _, ok := x.hashToPods[1][0]; ok {
		t.Errorf("hash 1 still maps to pod 0 after its LRU evicted it")
	}
	if got := x.matchLongestPrefix([]uint64{1, 2, 3}); got[0] != 2 || got[1] != 2 {
		t.Errorf("after eviction, matchLongestPrefix(1,2,3) = %v, want pod 0: 2 (GIE counts holders of each block of the run), pod 1: 2", got)
	}
	x.add([]uint64{5, 6, 7}, 1)
	if _, ok := x.hashToPods[1]; ok {
		t.Errorf("hash 1 is held by no pod but stays in the reverse map")
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
