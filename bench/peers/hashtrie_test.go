package peers

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHashTrieLongestPrefixMatch(t *testing.T) {
	sys := strings.Repeat("s", 8)        // two chunks of 4
	conv := sys + strings.Repeat("c", 6) // two more, the last one short
	trie := newHashTrie(4)
	trie.insert([]byte(conv), 1)
	trie.insert([]byte(sys+"other"), 2)
	trie.insert([]byte("elsewhere"), 3)
	trie.insert([]byte("ééééz"), 4) // four characters, eight bytes, then one
	tests := []struct {
		name        string
		text        string
		available   []int
		wantMatched int
		want        []int
	}{
		{"no match: all available", "nothing alike", []int{1, 2, 3}, 0, []int{1, 2, 3}},
		{"through the short last chunk", conv, []int{1, 2, 3}, 16, []int{1}},
		{"diverging inside a chunk", conv[:10] + "more", []int{1, 2, 3}, 8, []int{1, 2}},
		{"shared chunks only", sys + "zzzz", []int{1, 2, 3}, 8, []int{1, 2}},
		{"holder unavailable: stop before its chunks", conv, []int{2, 3}, 8, []int{2}},
		{"a short chunk matches only itself", sys + "ot", []int{1, 2, 3}, 8, []int{1, 2}},
		{"chunks are characters, not bytes", "ééééxy", []int{1, 2, 3, 4}, 4, []int{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			matched, got := trie.longestPrefixMatch([]byte(tt.text), tt.available)
			if matched != tt.wantMatched || !slices.Equal(got, tt.want) {
				t.Errorf("longestPrefixMatch(%q, %v) = %d, %v, want %d, %v", tt.text, tt.available, matched, got, tt.wantMatched, tt.want)
			}
		})
	}
}

func TestQPSRoute(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := newRateWindow(time.Minute)
	w.add(0, t0)
	w.add(0, t0.Add(time.Second))
	w.add(1, t0)
	w.add(2, t0.Add(-2*time.Minute)) // seen, but outside the window
	if q, _ := w.qps(0, t0.Add(30*time.Second)); q != 2.0/60 {
		t.Errorf("qps(0) = %v, want 2 requests per minute", q)
	}
	tests := []struct {
		name       string
		candidates []int
		now        time.Time
		want       int
	}{
		{"never used first", []int{0, 1, 5}, t0, 2},
		{"lowest rate", []int{0, 1}, t0, 1},
		{"old requests age out", []int{0, 1, 2}, t0, 2},
		{"ties: first", []int{1, 0}, t0.Add(2 * time.Minute), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := qpsRoute(tt.candidates, w, tt.now); got != tt.want {
				t.Errorf("qpsRoute(%v) = %d, want %d", tt.candidates, got, tt.want)
			}
		})
	}
}
