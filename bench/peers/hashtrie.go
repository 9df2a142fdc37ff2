package peers

import (
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// hashTrie is the production-stack's HashTrie (src/vllm_router/prefix/
// hashtrie.py): a trie keyed by xxHash64 of each successive chunk of
// chunk characters of the prompt (the last one may be short), each node
// holding the set of endpoints a prompt through it was sent to. It never
// evicts ("we assume that there is no eviction of prefix cache").
type hashTrie struct {
	chunk int
	root  *trieNode
}

type trieNode struct {
	children  map[uint64]*trieNode
	endpoints map[int]struct{}
}

func newHashTrie(chunk int) *hashTrie {
	return &hashTrie{chunk: chunk, root: &trieNode{endpoints: map[int]struct{}{}}}
}

// chunks calls f with the hash of each successive chunk of text, as
// _chunk_and_hash does: xxh64(request[i:i+chunk_size]) of a Python string
// slices characters, and xxhash hashes their UTF-8 bytes.
func (t *hashTrie) chunks(text []byte, f func(h uint64) bool) {
	for len(text) > 0 {
		end := 0
		for n := 0; n < t.chunk && end < len(text); n++ {
			_, size := utf8.DecodeRune(text[end:])
			end += size
		}
		if !f(xxhash.Sum64(text[:end])) {
			return
		}
		text = text[end:]
	}
}

// insert records that endpoint was sent text.
func (t *hashTrie) insert(text []byte, endpoint int) {
	n := t.root
	n.endpoints[endpoint] = struct{}{}
	t.chunks(text, func(h uint64) bool {
		c := n.children[h]
		if c == nil {
			c = &trieNode{endpoints: map[int]struct{}{}}
			if n.children == nil {
				n.children = map[uint64]*trieNode{}
			}
			n.children[h] = c
		}
		n = c
		n.endpoints[endpoint] = struct{}{}
		return true
	})
}

// longestPrefixMatch follows text's chunks while some of the endpoints
// still selected hold them, and returns the characters matched (chunk per
// chunk followed, the last one counted whole, as upstream counts) and the
// endpoints (of available, in its order) holding the deepest match; with
// no match, all of available.
func (t *hashTrie) longestPrefixMatch(text []byte, available []int) (int, []int) {
	selected := available
	matched := 0
	n := t.root
	t.chunks(text, func(h uint64) bool {
		c := n.children[h]
		if c == nil {
			return false
		}
		var next []int
		for _, e := range selected {
			if _, ok := c.endpoints[e]; ok {
				next = append(next, e)
			}
		}
		if len(next) == 0 {
			return false
		}
		n, selected = c, next
		matched += t.chunk
		return true
	})
	return matched, selected
}

// rateWindow counts requests per endpoint over a sliding window, as the
// production-stack's RequestStatsMonitor does for its QPS.
type rateWindow struct {
	window time.Duration
	times  map[int][]time.Time // arrival times, oldest first
}

func newRateWindow(window time.Duration) *rateWindow {
	return &rateWindow{window: window, times: map[int][]time.Time{}}
}

// add records a request to endpoint at now.
func (w *rateWindow) add(endpoint int, now time.Time) {
	w.times[endpoint] = append(w.prune(endpoint, now), now)
}

// qps returns endpoint's request rate over the window ending at now, and
// whether it has ever received a request.
func (w *rateWindow) qps(endpoint int, now time.Time) (float64, bool) {
	ts, seen := w.times[endpoint]
	if !seen {
		return 0, false
	}
	ts = w.prune(endpoint, now)
	return float64(len(ts)) / w.window.Seconds(), true
}

func (w *rateWindow) prune(endpoint int, now time.Time) []time.Time {
	ts := w.times[endpoint]
	i := 0
	for i < len(ts) && now.Sub(ts[i]) > w.window {
		i++
	}
	if i > 0 {
		ts = append(ts[:0], ts[i:]...)
		w.times[endpoint] = ts
	}
	return ts
}

// qpsRoute is the production-stack's _qps_routing: the first candidate
// that has never received a request, else the one with the lowest rate
// (the first among ties). It returns an index into candidates.
func qpsRoute(candidates []int, w *rateWindow, now time.Time) int {
	best, bestQPS := 0, 0.0
	for i, c := range candidates {
		q, seen := w.qps(c, now)
		if !seen {
			return i
		}
		if i == 0 || q < bestQPS {
			best, bestQPS = i, q
		}
	}
	return best
}
