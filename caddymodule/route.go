package caddymodule

import (
	"errors"
	"net/http"
	"slices"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/caddymodule/dialect"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// varKey names the request variable that holds what the policy read from
// the body. Caddy's cloned request shares the original's variable table, so
// every attempt of one request (retries included) finds it there.
const varKey = "prefix_cache.request"

// skipCause says why a request was left to the fallback policy. The values
// are a bounded set: they appear in placeholders and metric labels.
type skipCause uint8

const (
	skipNone        skipCause = iota
	skipMethod                // not a POST
	skipEmpty                 // no body
	skipContentType           // a Content-Type that is not JSON
	skipEncoded               // a Content-Encoding other than identity
	skipTooLarge              // larger than max_body
	skipReadError             // the client's body failed while being read
	skipNotJSON               // not well-formed JSON
	skipDialect               // JSON of no known request shape
)

var skipNames = [...]string{
	skipNone:        "",
	skipMethod:      "method",
	skipEmpty:       "empty",
	skipContentType: "content_type",
	skipEncoded:     "encoded",
	skipTooLarge:    "too_large",
	skipReadError:   "read_error",
	skipNotJSON:     "not_json",
	skipDialect:     "unknown_dialect",
}

func (c skipCause) String() string { return skipNames[c] }

// peeked is what the policy took from one request's body. It is created
// once per request and never changed afterwards.
type peeked struct {
	skip skipCause
	body []byte // the exact bytes read from the client; nil when not read
	// buf is body's pooled buffer: it goes back to its pool once the
	// request is over, so reading body outside the attempt that read it
	// needs buf.pin() first (see bodypool.go).
	buf *bodyBuf

	// derived, for the policy instance that derived them
	owner     *PrefixCacheSelection
	dialect   string
	hashes    []prefixindex.Hash
	placement uint64
	textLen   int

	// tried lists the upstreams earlier attempts of this request chose.
	// Attempts run one after another on the request's goroutine.
	tried []string
	// charge is this request's share of the byte bound's load.
	charge charge
}

// route returns what the policy needs to route r: read from the body on
// the first attempt, from the request's variables on a retry.
func (s *PrefixCacheSelection) route(r *http.Request) *peeked {
	p, _ := caddyhttp.GetVar(r.Context(), varKey).(*peeked)
	if p == nil {
		p = &peeked{}
		p.skip, p.body, p.buf = s.readBody(r)
		caddyhttp.SetVar(r.Context(), varKey, p)
	}
	if p.skip != skipNone || p.owner == s {
		return p
	}
	if p.buf != nil {
		if !p.buf.pin() {
			// The request is over and its body recycled: nothing left
			// to route.
			return &peeked{skip: skipReadError}
		}
		defer p.buf.unpin()
	}
	if p.owner != nil {
		// Another prefix_cache handler with its own chunking already
		// routed this request; derive this instance's view afresh.
		q := &peeked{body: p.body}
		s.derive(r, q)
		q.body = nil
		return q
	}
	s.derive(r, p)
	return p
}

// derive parses p.body into routing text and chunk hashes.
//
// Only the text that max_chunks chunks hold is rendered: hashing needs no
// more, and the rest of the body is skipped rather than unescaped
// (dialect.AppendLimit). p.textLen, the request's prompt_bytes and its
// charge to the byte bound, is the whole text's length, exact for texts
// within the limit and an upper bound beyond it (escaped bytes past the
// limit count as written). The placement key is clamped to the rendered
// text, so a first user message ending past the limit is keyed on the
// first max_chunks chunks.
func (s *PrefixCacheSelection) derive(r *http.Request, p *peeked) {
	p.owner = s
	sc := getScratch()
	defer putScratch(sc)
	limit := s.MaxChunks * s.ChunkSize
	if s.ChunkSize > 0 && limit/s.ChunkSize != s.MaxChunks {
		limit = -1 // overflow: no limit
	}
	// Routing text is at most about as long as the body: one allocation
	// for a large body rather than a chain of doublings.
	size := len(p.body)
	if limit >= 0 {
		size = min(size, limit+3) // AppendLimit may write 3 bytes past the limit
	}
	text, req, err := dialect.AppendLimit(slices.Grow(sc.text[:0], size), p.body, limit)
	sc.text = text
	switch {
	case errors.Is(err, dialect.ErrUnknownDialect):
		p.skip = skipDialect
		return
	case err != nil:
		p.skip = skipNotJSON
		return
	}
	var tenant []byte
	if s.Tenant != "" {
		if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
			tenant = []byte(repl.ReplaceAll(s.Tenant, ""))
		}
	}
	seed := prefixindex.Seed(req.Model, req.CacheSalt, tenant)
	p.dialect = req.Kind.String()
	p.textLen = req.TextLen
	p.hashes = s.chunker.Append(make([]prefixindex.Hash, 0, min(len(text)/s.ChunkSize, s.MaxChunks)), seed, text)
	p.placement = placementKey(seed, text[:req.Placement])
}

// placementKey names where a cold request goes: the same key on every
// Caddy instance, for every turn of one conversation.
func placementKey(seed prefixindex.Hash, key []byte) uint64 {
	return xxh3.HashSeed(key, uint64(seed))
}
