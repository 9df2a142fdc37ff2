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

func TestRadixTreePrefixMatch(t *testing.T) {
	tests := []struct {
		name        string
		inserts     []insertion
		query       string
		wantMatched int
		wantTenant  int
		wantOK      bool
	}{
		{name: "empty", query: "abc"},
		{name: "registered only", inserts: []insertion{{"", 3}}, query: "abc", wantMatched: 0, wantTenant: 3, wantOK: true},
		{name: "exact", inserts: []insertion{{"hello world", 1}}, query: "hello world", wantMatched: 11, wantTenant: 1, wantOK: true},
		{name: "longer query", inserts: []insertion{{"hello", 1}}, query: "hello world", wantMatched: 5, wantTenant: 1, wantOK: true},
		{name: "ends inside a node", inserts: []insertion{{"hello world", 1}}, query: "help", wantMatched: 3, wantTenant: 1, wantOK: true},
		{name: "deeper tenant wins", inserts: []insertion{{"system A", 1}, {"system B", 2}}, query: "system B and more", wantMatched: 8, wantTenant: 2, wantOK: true},
		{name: "shared node, most recent tenant", inserts: []insertion{{"shared prefix x", 1}, {"shared prefix y", 2}}, query: "shared pre", wantMatched: 10, wantTenant: 2, wantOK: true},
		{name: "no common byte", inserts: []insertion{{"abc", 1}}, query: "xyz", wantMatched: 0, wantTenant: 1, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := buildTree(tt.inserts)
			matched, tenant, ok := tree.prefixMatch([]byte(tt.query))
			if matched != tt.wantMatched || ok != tt.wantOK || (ok && tenant != tt.wantTenant) {
				t.Errorf("prefixMatch(%q) = %d, %d, %v, want %d, %d, %v", tt.query, matched, tenant, ok, tt.wantMatched, tt.wantTenant, tt.wantOK)
			}
		})
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
	if m, tenant, _ := tree.prefixMatch([]byte("new conversation " + strings.Repeat("n", 20))); m != 37 || tenant != 0 {
		t.Errorf("the recent text was evicted: prefixMatch = %d, %d, want 37, 0", m, tenant)
	}
	if m, tenant, _ := tree.prefixMatch([]byte("old conversation " + strings.Repeat("o", 20))); m != 37 || tenant != 1 {
		t.Errorf("prefixMatch(old) = %d, %d, want 37 on tenant 1 only", m, tenant)
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

func TestSGLangChoose(t *testing.T) {
	p := sglangPolicy{cacheThreshold: 0.3, absThreshold: 64, relThreshold: 1.5}
	system := strings.Repeat("s", 80)
	tests := []struct {
		name       string
		inserts    []insertion
		text       string
		loads      []int
		want       int
		wantReason string
	}{
		{name: "cold, smallest tree", inserts: []insertion{{"abc", 0}}, text: "xyz", loads: []int{0, 0}, want: 1, wantReason: "miss"},
		{name: "cold, all empty: first", text: "xyz", loads: []int{0, 0}, want: 0, wantReason: "miss"},
		{name: "hit", inserts: []insertion{{system + " q1", 1}}, text: system + " q2", loads: []int{0, 0}, want: 1, wantReason: "hit"},
		{name: "match at the threshold is a miss", inserts: []insertion{{"abc" + strings.Repeat("q", 16), 0}, {"zz", 1}}, text: "abc" + strings.Repeat("-", 7), loads: []int{0, 0}, want: 1, wantReason: "miss"},
		{name: "hit ignores load when balanced", inserts: []insertion{{system, 0}}, text: system, loads: []int{60, 0}, want: 0, wantReason: "hit"},
		{name: "imbalanced", inserts: []insertion{{system, 0}}, text: system, loads: []int{100, 10}, want: 1, wantReason: "balance"},
		{name: "ratio under the relative threshold", inserts: []insertion{{system, 0}}, text: system, loads: []int{200, 135}, want: 0, wantReason: "hit"},
		{name: "imbalanced, first least loaded", text: system, loads: []int{5, 100, 5}, want: 0, wantReason: "balance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := buildTree(tt.inserts)
			tenants := make([]int, len(tt.loads))
			for i := range tenants {
				tenants[i] = i
			}
			got, reason := p.choose(tree, []byte(tt.text), tenants, tt.loads)
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("choose(%q, loads %v) = %d, %q, want %d, %q", tt.name, tt.loads, got, reason, tt.want, tt.wantReason)
			}
			if m, tenant, _ := tree.prefixMatch([]byte(tt.text)); m != len(tt.text) || tenant != tenants[got] {
				t.Errorf("after choose, the text is held by %d (%d bytes), want %d (all %d)", tenant, m, tenants[got], len(tt.text))
			}
		})
	}
}
