package peers

import (
	"strings"
	"testing"
)

type insertion struct {
	text   string
	tenant int
}

func buildTree(ins []insertion) *radixTree {
	tree := newRadixTree()
	for _, in := range ins {
		tree.insert([]byte(in.text), in.tenant)
	}
	return tree
}

// match runs a match that inserts nothing.
func match(tree *radixTree, text string) matchResult {
	return tree.matchAndInsert([]byte(text), func(matchResult) (int, bool) { return 0, false })
}

// TestRadixTreeMatch pins which tenant a match reports, worked from SMG's
// string_tree.rs (lightseekorg/smg at 73da68ca): a node's last_tenant is
// its creator, copied to the parent a split makes, and reported while it
// still holds the node; a partial match reports the child it stops in.
func TestRadixTreeMatch(t *testing.T) {
	tests := []struct {
		name        string
		inserts     []insertion
		query       string
		wantMatched int
		wantTenant  int
		wantOK      bool
	}{
		{name: "empty", query: "abc"},
		{name: "exact", inserts: []insertion{{"hello world", 1}}, query: "hello world", wantMatched: 11, wantTenant: 1, wantOK: true},
		{name: "longer query", inserts: []insertion{{"hello", 1}}, query: "hello world", wantMatched: 5, wantTenant: 1, wantOK: true},
		{name: "ends inside a node", inserts: []insertion{{"hello world", 1}}, query: "help", wantMatched: 3, wantTenant: 1, wantOK: true},
		{name: "deeper tenant wins", inserts: []insertion{{"system A", 1}, {"system B", 2}}, query: "system B and more", wantMatched: 8, wantTenant: 2, wantOK: true},
		{name: "split node keeps its creator", inserts: []insertion{{"shared prefix x", 1}, {"shared prefix y", 2}}, query: "shared pre", wantMatched: 10, wantTenant: 1, wantOK: true},
		{name: "a later holder does not take over", inserts: []insertion{{"same text", 1}, {"same text", 2}}, query: "same text", wantMatched: 9, wantTenant: 1, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := buildTree(tt.inserts)
			got := match(tree, tt.query)
			if got.matched != tt.wantMatched || got.ok != tt.wantOK || (got.ok && got.tenant != tt.wantTenant) {
				t.Errorf("match(%q) = %+v, want matched %d, tenant %d, ok %v", tt.query, got, tt.wantMatched, tt.wantTenant, tt.wantOK)
			}
		})
	}

	// The creator evicted, the node reports another holder (DashMap's
	// first; here the lowest id).
	tree := buildTree([]insertion{{"abcdef", 3}, {"abcdef", 1}, {strings.Repeat("q", 10), 3}})
	tree.evict(10) // tenant 3 holds 16: its oldest leaf, "abcdef", goes
	if got := match(tree, "abcdef"); !got.ok || got.tenant != 1 || got.matched != 6 {
		t.Errorf("after the creator's eviction, match(abcdef) = %+v, want tenant 1, 6 bytes", got)
	}
}

func TestRadixTreeSizes(t *testing.T) {
	tests := []struct {
		name    string
		inserts []insertion
		want    map[int]int
	}{
		{"one", []insertion{{"abcdef", 0}}, map[int]int{0: 6}},
		{"repeat", []insertion{{"abcdef", 0}, {"abcdef", 0}}, map[int]int{0: 6}},
		{"extension", []insertion{{"abc", 0}, {"abcdef", 0}}, map[int]int{0: 6}},
		{"split keeps sizes", []insertion{{"abcdef", 0}, {"abcxyz", 1}}, map[int]int{0: 6, 1: 6}},
		{"divergent same tenant", []insertion{{"abcdef", 0}, {"abcxyz", 0}}, map[int]int{0: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := buildTree(tt.inserts)
			for tenant, want := range tt.want {
				if got := tree.size[tenant]; got != want {
					t.Errorf("size[%d] = %d, want %d", tenant, got, want)
				}
			}
		})
	}
}

func TestRadixTreeEvict(t *testing.T) {
	tree := buildTree([]insertion{
		{"old conversation " + strings.Repeat("o", 20), 0},
		{"new conversation " + strings.Repeat("n", 20), 0},
		{"old conversation " + strings.Repeat("o", 20), 1},
	})
	// Tenant 0 holds 74 characters: "old conversation ooo…" is its
	// least recently used leaf.
	tree.evict(40)
	if got := tree.size[0]; got > 40 {
		t.Errorf("after evict(40), size[0] = %d, want at most 40", got)
	}
	if got := tree.size[1]; got != 37 {
		t.Errorf("after evict(40), size[1] = %d, want 37 (under the cap, untouched)", got)
	}
	if m := match(tree, "new conversation "+strings.Repeat("n", 20)); m.matched != 37 || m.tenant != 0 {
		t.Errorf("the recent text was evicted: match = %+v, want 37 bytes on tenant 0", m)
	}
	if m := match(tree, "old conversation "+strings.Repeat("o", 20)); m.matched != 37 || m.tenant != 1 {
		t.Errorf("match(old) = %+v, want 37 bytes on tenant 1 only", m)
	}
	tree.evict(0)
	for tenant, size := range tree.size {
		if size != 0 {
			t.Errorf("after evict(0), size[%d] = %d, want 0", tenant, size)
		}
	}
	if len(tree.root.children) != 0 {
		t.Errorf("after evict(0), the root has %d children, want 0", len(tree.root.children))
	}
}

// TestSGLangChoose's expected choices are worked from SMG's
// cache_aware.rs select_worker (lightseekorg/smg at 73da68ca): the
// min-load index is the lowest (load, processed, index); a match above
// cache_threshold goes to its tenant, anything else to the min-load index;
// imbalance (max-min > abs and max > rel x min) goes to the min-load
// index whatever the cache holds.
func TestSGLangChoose(t *testing.T) {
	p := sglangPolicy{cacheThreshold: 0.3, absThreshold: 64, relThreshold: 1.5}
	system := strings.Repeat("s", 80)
	tests := []struct {
		name       string
		inserts    []insertion
		text       string
		loads      []int
		processed  []int
		want       int
		wantReason string
	}{
		{name: "miss: least loaded, not the smallest tree", inserts: []insertion{{strings.Repeat("t", 500), 2}}, text: "xyz", loads: []int{3, 1, 1}, processed: []int{0, 5, 2}, want: 2, wantReason: "miss"},
		{name: "miss: ties on load, fewest processed", text: "xyz", loads: []int{0, 0, 0}, processed: []int{4, 1, 1}, want: 1, wantReason: "miss"},
		{name: "miss: full ties, first", text: "xyz", loads: []int{0, 0}, processed: []int{0, 0}, want: 0, wantReason: "miss"},
		{name: "hit", inserts: []insertion{{system + " q1", 1}}, text: system + " q2", loads: []int{0, 5}, processed: []int{0, 0}, want: 1, wantReason: "hit"},
		{name: "match at the threshold is a miss", inserts: []insertion{{"abc" + strings.Repeat("q", 16), 0}}, text: "abc" + strings.Repeat("-", 7), loads: []int{2, 0}, processed: []int{0, 0}, want: 1, wantReason: "miss"},
		{name: "hit ignores load when balanced", inserts: []insertion{{system, 0}}, text: system, loads: []int{60, 0}, processed: []int{0, 0}, want: 0, wantReason: "hit"},
		{name: "imbalanced", inserts: []insertion{{system, 0}}, text: system, loads: []int{100, 10}, processed: []int{0, 0}, want: 1, wantReason: "balance"},
		{name: "ratio under the relative threshold", inserts: []insertion{{system, 0}}, text: system, loads: []int{200, 135}, processed: []int{0, 0}, want: 0, wantReason: "hit"},
		{name: "imbalanced, least loaded then fewest processed", text: system, loads: []int{5, 100, 5}, processed: []int{3, 0, 1}, want: 2, wantReason: "balance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := buildTree(tt.inserts)
			tenants := make([]int, len(tt.loads))
			for i := range tenants {
				tenants[i] = i
			}
			got, reason := p.choose(tree, []byte(tt.text), tenants, tt.loads, tt.processed)
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("choose(%q, loads %v, processed %v) = %d, %q, want %d, %q", tt.name, tt.loads, tt.processed, got, reason, tt.want, tt.wantReason)
			}
			// The chosen worker now holds the whole text.
			m := tree.matchAndInsert([]byte(tt.text), func(matchResult) (int, bool) { return 0, false })
			if m.matched != len(tt.text) {
				t.Errorf("after choose, %d of %d bytes are in the tree", m.matched, len(tt.text))
			}
		})
	}

	// A hit on a worker that is not available: the first one, nothing
	// recorded.
	tree := buildTree([]insertion{{system, 7}})
	if got, reason := p.choose(tree, []byte(system), []int{0, 1}, []int{0, 0}, []int{0, 0}); got != 0 || reason != "stale" {
		t.Errorf("choose with the holder gone = %d, %q, want 0, stale", got, reason)
	}
}

// TestSGLangUpstreamTests replays SMG's cache_aware.rs unit tests
// test_cache_aware_with_balanced_load (default CacheAwareConfig: threshold
// 0.5, abs 32, rel 1.1; "hello world" twice and "hello" go to one worker)
// and test_cache_aware_with_imbalanced_load (threshold 0.5, abs 5, rel 2;
// worker 1 at load 20, worker 2 at 0: "test" goes to worker 2 five times).
func TestSGLangUpstreamTests(t *testing.T) {
	balanced := sglangPolicy{cacheThreshold: 0.5, absThreshold: 32, relThreshold: 1.1}
	tree := newRadixTree()
	processed := []int{0, 0}
	var first int
	for i, text := range []string{"hello world", "hello world", "hello"} {
		got, _ := balanced.choose(tree, []byte(text), []int{0, 1}, []int{0, 0}, processed)
		processed[got]++
		if i == 0 {
			first = got
		} else if got != first {
			t.Errorf("balanced: request %d (%q) went to %d, want %d with the first", i, text, got, first)
		}
	}

	imbalanced := sglangPolicy{cacheThreshold: 0.5, absThreshold: 5, relThreshold: 2}
	tree = newRadixTree()
	processed = []int{0, 0}
	for i := range 5 {
		got, reason := imbalanced.choose(tree, []byte("test"), []int{0, 1}, []int{20, 0}, processed)
		processed[got]++
		if got != 1 || reason != "balance" {
			t.Errorf("imbalanced: request %d went to %d (%s), want worker 2 (index 1), balance", i, got, reason)
		}
	}
}
