package caddymodule

import (
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
	"github.com/prefixcache/caddy-prefixcache/selection"
)

// scratch holds per-request buffers reused across requests.
type scratch struct {
	text   []byte
	ups    []*reverseproxy.Upstream
	ids    []prefixindex.ID
	depths []int
	cands  []selection.Candidate
}

// maxScratchText is the largest text buffer putScratch keeps: the text of
// a body of the default max_body, plus the rounding of its allocation.
// (It was 1 MiB, and a text near 1 MiB was then regrown on every request:
// route/1MB allocated 7.3 MB, see docs/overhead.md.) sync.Pool drops idle
// buffers within two GC cycles, so this pins nothing for long.
const maxScratchText = DefaultMaxBody + DefaultMaxBody/8

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(sc *scratch) {
	if cap(sc.text) > maxScratchText {
		sc.text = nil // do not pin one huge prompt's buffer forever
	}
	sc.text = sc.text[:0]
	clear(sc.ups) // drop the pointers so departed upstreams can be collected
	sc.ups = sc.ups[:0]
	sc.ids = sc.ids[:0]
	sc.depths = sc.depths[:0]
	sc.cands = sc.cands[:0]
	scratchPool.Put(sc)
}
