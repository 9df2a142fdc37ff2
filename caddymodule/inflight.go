package caddymodule

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// inflightBytes counts, per interned upstream, the routing-text bytes of
// the requests this process has sent it and not yet finished: the load
// signal of the byte bound. Caddy's Upstream.NumRequests counts requests
// alike whatever their size; a long agent context holds many times the KV
// memory of a short chat turn, and an engine fills its KV cache, then
// preempts and evicts, long before its request count looks high.
//
// A prefix that several requests in flight at one upstream share is held
// there once, as the engine holds its KV blocks once, so it is counted
// once: the text is counted in segments of segmentBytes, each named by the
// chained chunk hash at its end (which names the whole prefix up to
// there), and a segment adds its bytes when the first request in flight
// there brings it and gives them back when the last one ends. The rest of
// a request's text (past its last whole segment) is its own. Fifty
// requests of one shared-prefix group count their 8 KB system prompt once,
// not fifty times; the distinct 60k-token contexts of an agent fleet count
// in full.
//
// It is kept per shared state (one index, one table), so two prefix_cache
// configurations with different chunk sizes in one process do not see each
// other's bytes; they still share Caddy's request counts. A slot belongs to
// an ID; if the janitor forgets an upstream and its ID is reused, the new
// upstream inherits the old one's outstanding bytes until those requests
// finish, at most the length of the longest request.
type inflightBytes struct {
	total  [prefixindex.MaxIDs + 1]atomic.Int64
	shards [segmentShards]segmentShard
}

// segmentBytes is the granularity, in bytes of routing text, at which
// requests in flight share a prefix: about 250 tokens, DefaultMinMatch. A
// finer one counts a shared prefix to within fewer bytes and costs a map
// update per segment per request, twice.
const segmentBytes = 1024

// segmentShards spreads the segment counts over locks.
const segmentShards = 64

type segmentShard struct {
	mu sync.Mutex
	n  map[segmentKey]int32 // requests in flight holding the segment
}

type segmentKey struct {
	h  prefixindex.Hash
	id prefixindex.ID
}

func (t *inflightBytes) load(id prefixindex.ID) int64 { return max(t.total[id].Load(), 0) }

// footprint is the text one request holds at its upstream while in
// flight: size bytes, of which the segments named by every stride-th
// chunk hash (hashes[stride-1], hashes[2*stride-1], ...) are shareable,
// segBytes each. With no stride, all of it is the request's own.
type footprint struct {
	hashes   []prefixindex.Hash // not modified
	stride   int
	segBytes int64
	size     int64
}

// newFootprint returns the footprint of a request of size bytes whose
// chunk hashes, chunkSize bytes each, are hashes.
func newFootprint(hashes []prefixindex.Hash, chunkSize int, size int64) footprint {
	stride := max(1, segmentBytes/chunkSize)
	return footprint{hashes: hashes, stride: stride, segBytes: int64(stride * chunkSize), size: size}
}

// add counts f at id and returns the bytes it added.
func (t *inflightBytes) add(id prefixindex.ID, f footprint) int64 {
	added := f.size
	for i := f.stride - 1; f.stride > 0 && i < len(f.hashes); i += f.stride {
		added -= f.segBytes
		k := segmentKey{f.hashes[i], id}
		sh := &t.shards[uint64(k.h)%segmentShards]
		sh.mu.Lock()
		if sh.n == nil {
			sh.n = make(map[segmentKey]int32)
		}
		n := sh.n[k]
		sh.n[k] = n + 1
		sh.mu.Unlock()
		if n == 0 {
			added += f.segBytes
		}
	}
	t.total[id].Add(added)
	return added
}

// remove undoes add(id, f) and returns the bytes it gave back.
func (t *inflightBytes) remove(id prefixindex.ID, f footprint) int64 {
	removed := f.size
	for i := f.stride - 1; f.stride > 0 && i < len(f.hashes); i += f.stride {
		removed -= f.segBytes
		k := segmentKey{f.hashes[i], id}
		sh := &t.shards[uint64(k.h)%segmentShards]
		sh.mu.Lock()
		n := sh.n[k] - 1
		if n <= 0 {
			delete(sh.n, k)
			removed += f.segBytes
		} else {
			sh.n[k] = n
		}
		sh.mu.Unlock()
	}
	t.total[id].Add(-removed)
	return removed
}

// charge is what one request has added to an inflightBytes table: nothing,
// or its footprint at one upstream. A retry moves the charge to the
// upstream it chose; the charge is released when the request's context is
// done (its handler returned: the response, streamed or not, has ended)
// whatever happens in between. Attempts run one after another on the
// request's goroutine, but the context can end concurrently with an
// attempt (the client goes away), hence the lock.
type charge struct {
	mu   sync.Mutex
	tab  *inflightBytes // nil when nothing is charged
	id   prefixindex.ID
	fp   footprint
	done bool // released for good: the request has ended
	stop func() bool
}

// move charges f to id in tab, releasing what an earlier attempt of this
// request charged, and arranges the release when ctx is done.
func (c *charge) move(ctx context.Context, tab *inflightBytes, id prefixindex.ID, f footprint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	if c.tab != nil {
		c.tab.remove(c.id, c.fp)
	}
	c.tab, c.id, c.fp = tab, id, f
	tab.add(id, f)
	if c.stop == nil {
		c.stop = context.AfterFunc(ctx, c.release)
	}
}

// release gives back what is charged; later moves charge nothing.
func (c *charge) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tab != nil {
		c.tab.remove(c.id, c.fp)
		c.tab = nil
	}
	c.done = true
}
