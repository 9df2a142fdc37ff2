package peers

import "container/heap"

// radixTree is SGLang's approximate, multi-tenant radix tree
// (sgl-router src/policies/tree.rs): one tree of the raw request texts sent
// to any worker, each node labelled with the workers ("tenants") believed
// to hold its text and when each last touched it, plus each tenant's
// character count. It stores bytes where SGLang stores chars (the same for
// ASCII), and a logical clock where SGLang stores milliseconds.
type radixTree struct {
	root  *radixNode
	size  map[int]int // characters per tenant
	clock int64
}

type radixNode struct {
	text     []byte
	children map[byte]*radixNode
	parent   *radixNode
	tenants  map[int]int64 // tenant -> last access
}

func newRadixTree() *radixTree {
	return &radixTree{root: &radixNode{tenants: map[int]int64{}}, size: map[int]int{}}
}

// insert records that tenant holds text, splitting nodes where text leaves
// them, as tree.rs's insert does.
func (t *radixTree) insert(text []byte, tenant int) {
	t.clock++
	now := t.clock
	curr := t.root
	curr.tenants[tenant] = now
	if _, ok := t.size[tenant]; !ok {
		t.size[tenant] = 0
	}
	for i := 0; i < len(text); {
		child := curr.children[text[i]]
		if child == nil {
			n := &radixNode{text: append([]byte(nil), text[i:]...), parent: curr, tenants: map[int]int64{tenant: now}}
			if curr.children == nil {
				curr.children = map[byte]*radixNode{}
			}
			curr.children[text[i]] = n
			t.size[tenant] += len(n.text)
			return
		}
		shared := commonPrefix(child.text, text[i:])
		if shared < len(child.text) {
			mid := &radixNode{
				text:     child.text[:shared],
				parent:   curr,
				tenants:  make(map[int]int64, len(child.tenants)),
				children: map[byte]*radixNode{child.text[shared]: child},
			}
			for k, v := range child.tenants {
				mid.tenants[k] = v
			}
			child.text = child.text[shared:]
			child.parent = mid
			curr.children[text[i]] = mid
			child = mid
		}
		if _, ok := child.tenants[tenant]; !ok {
			t.size[tenant] += len(child.text)
		}
		child.tenants[tenant] = now
		curr = child
		i += shared
	}
}

// prefixMatch returns the length of the longest prefix of text in the
// tree and a tenant of the node where the match ends, and refreshes that
// tenant's access times up to the root. SGLang takes the first tenant of
// the node's DashMap (arbitrary); this takes the most recently used. ok is
// false if the tree has no tenant.
func (t *radixTree) prefixMatch(text []byte) (matched, tenant int, ok bool) {
	curr := t.root
	for matched < len(text) {
		child := curr.children[text[matched]]
		if child == nil {
			break
		}
		shared := commonPrefix(child.text, text[matched:])
		matched += shared
		curr = child
		if shared < len(child.text) {
			break
		}
	}
	tenant, last := -1, int64(-1)
	for k, v := range curr.tenants {
		if v > last || (v == last && k < tenant) {
			tenant, last = k, v
		}
	}
	if tenant < 0 {
		return 0, 0, false
	}
	t.clock++
	for n := curr; n != nil; n = n.parent {
		n.tenants[tenant] = t.clock
	}
	return matched, tenant, true
}

// smallest returns the candidate tenant with the fewest characters in the
// tree, the first of candidates among ties.
func (t *radixTree) smallest(candidates []int) int {
	best := candidates[0]
	for _, c := range candidates[1:] {
		if t.size[c] < t.size[best] {
			best = c
		}
	}
	return best
}

// evict removes, for every tenant holding more than maxSize characters,
// its least recently used leaves until it holds at most maxSize, as
// tree.rs's evict_tenant_by_size does. Nodes left without a tenant are
// removed.
func (t *radixTree) evict(maxSize int) {
	var h leafHeap
	var walk func(n *radixNode)
	walk = func(n *radixNode) {
		for _, c := range n.children {
			walk(c)
		}
		for tenant := range n.tenants {
			if n != t.root && isLeafOf(n, tenant) {
				h = append(h, leaf{n.tenants[tenant], tenant, n})
			}
		}
	}
	walk(t.root)
	heap.Init(&h)
	for h.Len() > 0 {
		e := heap.Pop(&h).(leaf)
		if t.size[e.tenant] <= maxSize {
			continue
		}
		if _, ok := e.node.tenants[e.tenant]; !ok {
			continue
		}
		delete(e.node.tenants, e.tenant)
		t.size[e.tenant] -= len(e.node.text)
		parent := e.node.parent
		if len(e.node.tenants) == 0 && len(e.node.children) == 0 {
			delete(parent.children, e.node.text[0])
		}
		if parent != t.root && isLeafOf(parent, e.tenant) {
			if at, ok := parent.tenants[e.tenant]; ok {
				heap.Push(&h, leaf{at, e.tenant, parent})
			}
		}
	}
}

// isLeafOf reports whether tenant holds n but none of n's children.
func isLeafOf(n *radixNode, tenant int) bool {
	if _, ok := n.tenants[tenant]; !ok {
		return false
	}
	for _, c := range n.children {
		if _, ok := c.tenants[tenant]; ok {
			return false
		}
	}
	return true
}

type leaf struct {
	at     int64
	tenant int
	node   *radixNode
}

// leafHeap orders leaves oldest first.
type leafHeap []leaf

func (h leafHeap) Len() int           { return len(h) }
func (h leafHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h leafHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leafHeap) Push(x any)        { *h = append(*h, x.(leaf)) }
func (h *leafHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// sglangPolicy is cache_aware's choice (sgl-router
// src/policies/cache_aware.rs, select_worker).
type sglangPolicy struct {
	cacheThreshold float64
	absThreshold   int
	relThreshold   float64
}

// choose picks one of tenants (the available workers, in pool order) for
// text, given their loads, and records text for it in the tree:
//
//   - imbalanced (max-min > abs and max > rel x min): the least loaded,
//     the first among ties ("balance");
//   - else the tenant of the longest match if it covers more than
//     cache_threshold of text ("hit");
//   - else the tenant with the smallest share of the tree ("miss").
//
// A matched tenant that is not among tenants (unavailable) gives the first
// of tenants, as SGLang's fallback to its first healthy worker does.
func (p sglangPolicy) choose(tree *radixTree, text []byte, tenants, loads []int) (int, string) {
	for _, t := range tenants {
		if _, ok := tree.size[t]; !ok {
			tree.insert(nil, t) // a new worker starts with an empty tree
		}
	}
	maxLoad, minLoad := loads[0], loads[0]
	for _, l := range loads[1:] {
		maxLoad, minLoad = max(maxLoad, l), min(minLoad, l)
	}
	if maxLoad-minLoad > p.absThreshold && float64(maxLoad) > float64(minLoad)*p.relThreshold {
		best := 0
		for i, l := range loads {
			if l < loads[best] {
				best = i
			}
		}
		tree.insert(text, tenants[best])
		return best, "balance"
	}
	var rate float64
	matched, tenant, ok := tree.prefixMatch(text)
	if ok && len(text) > 0 {
		rate = float64(matched) / float64(len(text))
	}
	reason := "hit"
	if !ok || rate <= p.cacheThreshold {
		tenant, reason = tree.smallest(tenants), "miss"
	}
	for i, t := range tenants {
		if t == tenant {
			tree.insert(text, tenant)
			return i, reason
		}
	}
	return 0, "stale"
}
