package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/dialect"
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
	skipIncremental           // an incremental (streamed) upload, proxied as it arrives
	skipBudget                // reading it would take the process's body buffers past body_budget
	skipNoTenant              // tenant is configured and the request's value is empty
	skipUnindexed             // no available upstream has an index ID (all 65,535 in use)
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
	skipIncremental: "incremental",
	skipBudget:      "budget",
	skipNoTenant:    "no_tenant",
	skipUnindexed:   "unindexed",
}

func (c skipCause) String() string { return skipNames[c] }

// peeked is what was read from one request's body, once per request,
// whoever read it first (this policy, or the model matcher before it), and
// what each policy instance that routed the request derived from it. It
// lives in the request's variables, so it must never print what it holds:
// a placeholder {http.vars.prefix_cache.request} prints only its String.
type peeked struct {
	skip skipCause
	body []byte // the exact bytes read from the client; nil when not read
	// buf is body's pooled buffer: it goes back to its pool as
	// bodypool.go says, so reading body outside the attempt that read
	// it needs buf.pin() first.
	buf    *bodyBuf
	replay *replayBody // the replay installed as the body; nil when nothing was read
	repl   *caddy.Replacer

	mu        sync.Mutex
	views     []*view // one per policy instance that derived this body
	finished  bool    // finish has run: the request is over
	modelRead bool    // model was read, for the model matcher
	model     string
}

// String is all a placeholder or a log line can print of a request's
// record: never its bytes.
func (p *peeked) String() string { return "prefix_cache request" }

// Format prints String for every verb, so fmt cannot print the fields.
func (p *peeked) Format(f fmt.State, _ rune) { io.WriteString(f, p.String()) }

// MarshalJSON encodes String, for the same reason.
func (p *peeked) MarshalJSON() ([]byte, error) { return []byte(`"prefix_cache request"`), nil }

// view is what one policy instance derived from a request's body and did
// with it. Attempts run one after another on the request's goroutine; the
// charge's lock guards what settle reads from another goroutine.
type view struct {
	owner     *PrefixCacheSelection
	skip      skipCause // this instance's own reason to fall back
	dialect   string
	scope     prefixindex.Scope
	scopeKey  uint64 // the tenant's key, 0 without a tenant
	hashes    []prefixindex.Hash
	hashBytes int64 // counted against the body budget until the request ends
	placement uint64
	// placementLen is the length of the placement text (for chat, the
	// routing text through the first user message).
	placementLen int
	textLen      int
	// tried lists the upstreams earlier attempts chose.
	tried []string
	// attempts counts this instance's Selects for the request, routed or
	// not: each after the first is a retry.
	attempts int
	// charge is this request's share of the byte bound's load, and the
	// upstream its last attempt chose.
	charge charge
	// age and aged are the last attempt's decision's (see decision),
	// for learning from the answer. Set and read on the request's own
	// goroutine.
	age  uint32
	aged bool
}

// peekRequest reads r's body (readBody) and records what it read in the
// request's variables. When it read any bytes, it arranges for the record
// to be finished when the request's context is done: the buffer released,
// each view settled.
func peekRequest(r *http.Request, maxBody, budget int64, keep bool) *peeked {
	p := &peeked{}
	p.skip, p.body, p.buf, p.replay = readBody(r, maxBody, budget, keep)
	p.repl, _ = r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	caddyhttp.SetVar(r.Context(), varKey, p)
	if p.replay != nil && p.replay.buf != nil {
		context.AfterFunc(r.Context(), p.finish)
	}
	return p
}

// finish runs once the request is over. (It may run before any view is
// derived, when the client left during the read: a view derived after it
// charges nothing.)
func (p *peeked) finish() {
	p.replay.buf.markCtxDone()
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return
	}
	p.finished = true
	views := slices.Clone(p.views)
	p.mu.Unlock()
	for _, v := range views {
		v.settle(p.repl)
		releaseHashes(v.hashBytes)
	}
}

// route returns what the policy needs to route r: the body read on the
// first attempt (or by a model matcher before it), the view derived for
// this instance. The view is nil when the request is not routable.
//
// A request this instance would send to the fallback whatever its body
// says, one without a tenant value, is not read: its body streams to the
// fallback's upstream as it comes, and holds no buffer.
func (s *PrefixCacheSelection) route(r *http.Request) (*peeked, *view) {
	var tenant []byte
	var noTenant, evaluated bool
	p, _ := caddyhttp.GetVar(r.Context(), varKey).(*peeked)
	if p == nil {
		tenant, noTenant = s.tenantOf(r)
		evaluated = true
		if noTenant && unreadable(r, s.MaxBody) == skipNone {
			// Not recorded in the request's variables: a model matcher
			// or another instance may still read the body.
			return &peeked{skip: skipNoTenant}, nil
		}
		p = peekRequest(r, s.MaxBody, s.BodyBudget, s.keepBody(r))
	}
	if p.skip != skipNone {
		return p, nil
	}
	p.mu.Lock()
	i := slices.IndexFunc(p.views, func(v *view) bool { return v.owner == s })
	p.mu.Unlock()
	if i >= 0 {
		p.mu.Lock()
		v := p.views[i]
		p.mu.Unlock()
		return p, v
	}
	if !p.buf.pin() {
		// The request is over and its body recycled: nothing left to
		// route on.
		return p, &view{owner: s, skip: skipReadError}
	}
	if !evaluated {
		tenant, noTenant = s.tenantOf(r)
	}
	v := &view{owner: s}
	switch {
	case int64(len(p.body)) > s.MaxBody:
		v.skip = skipTooLarge // read by a matcher with a larger max_body
	case noTenant:
		v.skip = skipNoTenant // read by a model matcher
	default:
		s.derive(p.body, v, tenant)
	}
	p.buf.unpin()
	// This handler knows whether its retries may need the body after it
	// was sent; it says so before the body is sent (for a body the model
	// matcher read, for the first time).
	p.buf.setKeep(s.keepBody(r))
	p.mu.Lock()
	if p.finished {
		// The request ended during the read: this view charges
		// nothing, and no finish will give its hashes back.
		v.charge.close()
		releaseHashes(v.hashBytes)
	}
	p.views = append(p.views, v)
	p.mu.Unlock()
	return p, v
}

// tenantOf returns r's tenant value, and whether r has none though this
// instance needs one: tenant is set, its value for r is empty, and
// allow_empty_tenant is off.
func (s *PrefixCacheSelection) tenantOf(r *http.Request) (tenant []byte, missing bool) {
	if s.Tenant == "" {
		return nil, false
	}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		tenant = []byte(repl.ReplaceAll(s.Tenant, ""))
	}
	return tenant, len(tenant) == 0 && !s.AllowEmptyTenant
}

// derive parses body into routing text and chunk hashes for v, in the
// scope of tenant (nil without the tenant option).
//
// Only the text that max_chunks chunks hold is rendered: hashing needs no
// more, and the rest of the body is skipped rather than unescaped
// (dialect.AppendLimit). v.textLen, the request's prompt_bytes and its
// charge to the byte bound, is the whole text's length, exact for texts
// within the limit and an upper bound beyond it (escaped bytes past the
// limit count as written). The placement key is clamped to the rendered
// text, so a first user message ending past the limit is keyed on the
// first max_chunks chunks.
func (s *PrefixCacheSelection) derive(body []byte, v *view, tenant []byte) {
	limit := s.MaxChunks * s.ChunkSize
	if s.ChunkSize > 0 && limit/s.ChunkSize != s.MaxChunks {
		limit = -1 // overflow: no limit
	}
	// Routing text is at most about as long as the body: one allocation
	// for a large body rather than a chain of doublings.
	size := len(body)
	if limit >= 0 {
		size = min(size, limit+3) // AppendLimit may write 3 bytes past the limit
	}
	buf := getText(size, s.BodyBudget)
	if buf == nil {
		v.skip = skipBudget
		return
	}
	text, req, err := dialect.AppendLimit(buf, body, limit)
	if cap(text) == cap(buf) {
		defer putText(text)
	}
	switch {
	case errors.Is(err, dialect.ErrUnknownDialect):
		v.skip = skipDialect
		return
	case err != nil:
		v.skip = skipNotJSON
		return
	}
	seed := prefixindex.KeyedSeed(s.keys.seed, req.Model, req.CacheSalt, tenant)
	if s.Tenant != "" {
		v.scopeKey = tenantKey(tenant, s.keys.tenant)
		v.scope = s.state.index.Scope(v.scopeKey, *s.TenantShare)
	}
	v.dialect = req.Kind.String()
	v.textLen = req.TextLen
	n := min(len(text)/s.ChunkSize, s.MaxChunks)
	if !reserveHashes(8*int64(n), s.BodyBudget) {
		v.skip = skipBudget
		return
	}
	v.hashBytes = 8 * int64(n)
	v.hashes = s.chunker.Append(make([]prefixindex.Hash, 0, n), seed, text)
	v.placement = placementKey(seed, text[:req.Placement])
	v.placementLen = req.Placement
}

// tenantKey names a tenant's scope of the index: a hash of its value,
// never 0 (which names no tenant), the same on every Caddy instance.
func tenantKey(tenant []byte, key uint64) uint64 {
	return xxh3.HashSeed(tenant, 0x74656e616e74^key) | 1 // "tenant"
}

// placementKey names where a cold request goes: the same key on every
// Caddy instance, for every turn of one conversation.
func placementKey(seed prefixindex.Hash, key []byte) uint64 {
	return xxh3.HashSeed(key, uint64(seed))
}
