package peers

import (
	"container/heap"
	"math"
)

// radixTree is SMG's approximate, multi-tenant string radix tree
// (crates/kv_index/src/string_tree.rs, Tree): one tree of the request
// texts sent to any worker, each node labelled with the workers
// ("tenants") believed to hold its text and a logical access time per
// tenant, each tenant's character count, and per node the cached
// "last tenant" that a match ending there reports. It keeps upstream's
// bookkeeping, which decides both routing and eviction:
//
//   - a node's last tenant is the tenant that created it; a split copies
//     it to the new parent; when that tenant no longer holds the node, the
//     match reports the first of the node's tenants (DashMap order,
//     arbitrary; here the lowest id) and caches it;
//   - inserting attaches the tenant to the nodes on the path with time 0
//     if it was not there, and gives only the node where the text ends a
//     real time; a match refreshes the time of the tenant it reports once
//     in 8 (when the epoch counter is a multiple of 8);
//   - eviction removes, per tenant over the size cap, its leaves (nodes it
//     holds none of whose children it holds) oldest first.
//
// It stores bytes where SMG stores chars (the same for ASCII).
type radixTree struct {
	root  *radixNode
	size  map[int]int // characters per tenant
	epoch uint64      // SMG's EPOCH_COUNTER, fetch_add per use
}

type radixNode struct {
	text     []byte
	children map[byte]*radixNode
	parent   *radixNode
	tenants  map[int]uint64 // tenant -> last access epoch
	last     int            // cached last tenant, -1 for none
}

func newRadixTree() *radixTree {
	return &radixTree{root: &radixNode{tenants: map[int]uint64{}, last: -1}, size: map[int]int{}}
}

func (t *radixTree) nextEpoch() uint64 {
	e := t.epoch
	t.epoch++
	return e
}

// register adds tenant to the tree with an empty text, as init_workers'
// insert_text("", url) does.
func (t *radixTree) register(tenant int) {
	if _, ok := t.size[tenant]; ok {
		return
	}
	t.insert(nil, tenant)
}

// insert records that tenant holds text (insert_text).
func (t *radixTree) insert(text []byte, tenant int) {
	if _, ok := t.root.tenants[tenant]; !ok {
		t.root.tenants[tenant] = 0
	}
	if _, ok := t.size[tenant]; !ok {
		t.size[tenant] = 0
	}
	t.insertFrom(t.root, text, tenant)
}

// insertFrom inserts rest below prev for tenant (insert_from): new leaves
// and the final node get a real time, nodes passed through are attached
// with time 0 if tenant did not hold them, and a node the text leaves
// midway is split.
func (t *radixTree) insertFrom(prev *radixNode, rest []byte, tenant int) {
	for len(rest) > 0 {
		child := prev.children[rest[0]]
		if child == nil {
			n := &radixNode{
				text:    append([]byte(nil), rest...),
				parent:  prev,
				tenants: map[int]uint64{tenant: t.nextEpoch()},
				last:    tenant,
			}
			if prev.children == nil {
				prev.children = map[byte]*radixNode{}
			}
			prev.children[rest[0]] = n
			t.size[tenant] += len(rest)
			return
		}
		shared := commonPrefix(rest, child.text)
		if shared < len(child.text) {
			mid := &radixNode{
				text:     child.text[:shared:shared],
				parent:   prev,
				tenants:  make(map[int]uint64, len(child.tenants)+1),
				children: map[byte]*radixNode{child.text[shared]: child},
				last:     child.last,
			}
			for k, v := range child.tenants {
				mid.tenants[k] = v
			}
			child.text = child.text[shared:]
			child.parent = mid
			prev.children[rest[0]] = mid
			child = mid
		}
		if _, ok := child.tenants[tenant]; !ok {
			t.size[tenant] += len(child.text)
			child.tenants[tenant] = 0
		}
		prev = child
		rest = rest[shared:]
	}
	prev.tenants[tenant] = t.nextEpoch()
}

// matchResult is what a match reports (PrefixMatchResult).
type matchResult struct {
	matched int  // bytes of the text matched
	tenant  int  // the match node's tenant
	ok      bool // false if the match node has no tenant ("empty")
}

// matchAndInsert matches text, lets choose pick the tenant to insert it
// for from the match (false: insert nothing), and inserts it without
// walking the matched prefix again (match_and_insert_with). The match
// ends at the deepest node fully matched or at the child the text leaves
// midway.
func (t *radixTree) matchAndInsert(text []byte, choose func(matchResult) (int, bool)) matchResult {
	rest := text
	curr, matchNode := t.root, t.root
	var path []*radixNode
	res := matchResult{}
	for len(rest) > 0 {
		child := curr.children[rest[0]]
		if child == nil {
			break
		}
		shared := commonPrefix(rest, child.text)
		res.matched += shared
		matchNode = child
		if shared < len(child.text) {
			break
		}
		path = append(path, child)
		rest = rest[shared:]
		curr = child
	}
	res.tenant, res.ok = matchNode.tenant()
	if e := t.nextEpoch(); e&7 == 0 && res.ok {
		matchNode.tenants[res.tenant] = e
	}

	tenant, insert := choose(res)
	if !insert {
		return res
	}
	if _, ok := t.root.tenants[tenant]; !ok {
		t.root.tenants[tenant] = 0
	}
	if _, ok := t.size[tenant]; !ok {
		t.size[tenant] = 0
	}
	for _, n := range path {
		if _, ok := n.tenants[tenant]; !ok {
			t.size[tenant] += len(n.text)
			n.tenants[tenant] = 0
		}
	}
	if len(rest) == 0 {
		curr.tenants[tenant] = t.nextEpoch()
	} else {
		t.insertFrom(curr, rest, tenant)
	}
	return res
}

// tenant resolves the node's reported tenant: the cached last tenant while
// it still holds the node, else the lowest of its tenants, cached.
func (n *radixNode) tenant() (int, bool) {
	if _, ok := n.tenants[n.last]; ok && n.last >= 0 {
		return n.last, true
	}
	best := math.MaxInt
	for k := range n.tenants {
		best = min(best, k)
	}
	if best == math.MaxInt {
		return 0, false
	}
	n.last = best
	return best, true
}

// evict removes, for every tenant holding more than maxSize characters,
// its least recently used leaves until it holds at most maxSize, as
// evict_tenant_by_size does. Nodes left without a tenant or a child are
// removed; a parent left a leaf of the tenant joins the queue.
func (t *radixTree) evict(maxSize int) {
	var h leafHeap
	var walk func(n *radixNode)
	walk = func(n *radixNode) {
		for _, c := range n.children {
			walk(c)
		}
		if n == t.root {
			return
		}
		for tenant, at := range n.tenants {
			if isLeafOf(n, tenant) {
				h = append(h, leaf{at, tenant, n})
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
		if !isLeafOf(e.node, e.tenant) {
			continue
		}
		t.size[e.tenant] -= len(e.node.text)
		delete(e.node.tenants, e.tenant)
		parent := e.node.parent
		if len(e.node.tenants) == 0 && len(e.node.children) == 0 {
			delete(parent.children, e.node.text[0])
		}
		if parent != t.root && isLeafOf(parent, e.tenant) {
			heap.Push(&h, leaf{parent.tenants[e.tenant], e.tenant, parent})
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
	at     uint64
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

// sglangPolicy is cache_aware's choice for HTTP workers (SMG
// model_gateway/src/policies/cache_aware.rs: select_worker,
// is_imbalanced, select_worker_min_load, select_worker_with_text).
type sglangPolicy struct {
	cacheThreshold float64
	absThreshold   int
	relThreshold   float64
}

// choose picks one of tenants (the available workers, in pool order) for
// text, given their in-flight loads and the requests this policy has sent
// each (processed), and records text for it in the tree:
//
//   - imbalanced (max-min > abs and max > rel x min): the least loaded
//     ("balance");
//   - else the tenant of the match if it covers more than cache_threshold
//     of text ("hit");
//   - else the least loaded ("miss").
//
// The least loaded is the lowest (load, processed, index), SMG's min-load
// key. A matched tenant that is not among tenants (unavailable) gives the
// first of tenants and records nothing ("stale"), as SMG's fallback to
// its first healthy worker does.
func (p sglangPolicy) choose(tree *radixTree, text []byte, tenants, loads, processed []int) (int, string) {
	for _, t := range tenants {
		tree.register(t)
	}
	minIdx := 0
	maxLoad, minLoad := loads[0], loads[0]
	for i := 1; i < len(loads); i++ {
		maxLoad, minLoad = max(maxLoad, loads[i]), min(minLoad, loads[i])
		if loads[i] < loads[minIdx] || (loads[i] == loads[minIdx] && processed[i] < processed[minIdx]) {
			minIdx = i
		}
	}
	if maxLoad-minLoad > p.absThreshold && float64(maxLoad) > float64(minLoad)*p.relThreshold {
		tree.insert(text, tenants[minIdx])
		return minIdx, "balance"
	}
	chosen, reason := -1, "miss"
	tree.matchAndInsert(text, func(m matchResult) (int, bool) {
		var rate float64
		if len(text) > 0 {
			rate = float64(m.matched) / float64(len(text))
		}
		if rate > p.cacheThreshold {
			reason = "hit"
			for i, t := range tenants {
				if m.ok && t == m.tenant {
					chosen = i
					return t, true
				}
			}
			return 0, false
		}
		chosen = minIdx
		return tenants[minIdx], true
	})
	if chosen < 0 {
		return 0, "stale"
	}
	return chosen, reason
}
