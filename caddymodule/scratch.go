package caddymodule

import (
	"runtime"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
	"github.com/prefixcache/caddy-prefixcache/selection"
)

// scratch holds per-request buffers reused across requests.
type scratch struct {
	ups    []*reverseproxy.Upstream
	ids    []prefixindex.ID
	depths []int
	cands  []selection.Candidate
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(sc *scratch) {
	clear(sc.ups) // drop the pointers so departed upstreams can be collected
	sc.ups = sc.ups[:0]
	sc.ids = sc.ids[:0]
	sc.depths = sc.depths[:0]
	sc.cands = sc.cands[:0]
	scratchPool.Put(sc)
}

// Routing-text buffers are as large as a request's rendered text (up to
// max_chunks x chunk_size, 512 KiB by default) and live only while one
// request is derived, which is CPU-bound: at most about GOMAXPROCS at
// once. A sync.Pool would drop them at every garbage collection, and under
// a burst of long prompts each derive would allocate a fresh one: 512 KiB
// of garbage per request, which the collector's headroom doubles in
// Caddy's resident set (bench/memory). A small free list keeps them, and
// they count against the body budget like the bodies they are made from.

// maxScratchText is the largest text buffer kept: the text of a body of
// the default max_body, plus the rounding of its allocation, so that no
// text of a routable body is regrown on every request.
const maxScratchText = DefaultMaxBody + DefaultMaxBody/8

// textBufs is the free list of routing-text buffers, two per P.
var textBufs = make(chan []byte, 2*runtime.GOMAXPROCS(0))

// getText returns an empty text buffer with room for n bytes: a free one
// if it is large enough, else a new one if it fits within budget, else an
// idle body buffer, else nil.
func getText(n int, budget int64) []byte {
	select {
	case b := <-textBufs:
		if cap(b) >= n {
			return b[:0]
		}
		// Too small: let it go (the collector gives its bytes back).
	default:
	}
	if b := allocBody(capacityFor(n), budget); b != nil {
		return b
	}
	// No room for a new one: an idle body buffer serves as well.
	if c := classOf(n); c >= 0 {
		if bb := pooledFrom(c); bb != nil {
			return bb.b[:0]
		}
	}
	return nil
}

// putText keeps b for the next derive, unless the list is full or b is
// one huge prompt's.
func putText(b []byte) {
	if cap(b) == 0 || cap(b) > maxScratchText {
		return
	}
	select {
	case textBufs <- b[:0]:
	default:
	}
}
