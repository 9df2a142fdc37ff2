// Package caddymodule is the Caddy adapter of the prefix_cache load-balancing
// policy: the module and its configuration, the request-body peek, the
// placeholders it sets, and the state it keeps across config reloads.
//
// The algorithm lives elsewhere: caddymodule/dialect turns a request body
// into routing text, prefixindex hashes that text into chained chunk hashes
// and remembers which upstream holds which prefix, and selection makes the
// choice. This package only moves bytes between Caddy and those packages.
package caddymodule

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
	"github.com/prefixcache/caddy-prefixcache/selection"
)

func init() {
	caddy.RegisterModule(new(PrefixCacheSelection))
}

// Defaults of the options that are not the index's or the choice's own
// (those are prefixindex.DefaultChunkSize, DefaultMaxChunks,
// DefaultMaxEntries and selection.DefaultLoadFactor, DefaultAllowance).
const (
	// DefaultMaxBody is the largest body the policy reads to route on:
	// a 128k-token conversation is about 512 KiB of JSON, and a couple of
	// base64 images add about 1.4 MiB each. A larger body goes to the
	// fallback policy, unread. The bound is also the most memory one
	// request can pin while it is being proxied.
	DefaultMaxBody = 4 << 20

	// DefaultMinMatch is the shortest prefix, in bytes of routing text,
	// that counts as a useful match: one kilobyte is ~250 tokens, below
	// which the prefill saved does not pay for leaving the request's
	// rendezvous placement.
	DefaultMinMatch = 1024

	// DefaultMinMatchRatio is the default min_match_ratio: the share of
	// a request's routing text a match must cover to count. 0.3 is the
	// cache_threshold of SGLang's cache-aware router; on the Mooncake
	// trace it doubles the hit rate (docs/peers.md), because a shared
	// system prompt no longer pulls every new conversation onto its
	// holders.
	DefaultMinMatchRatio = 0.3

	// DefaultLoadAllowanceBytes is the default load_allowance_bytes:
	// 128 KiB of routing text, about 32k tokens, the size of 16 requests
	// of 2k tokens (the request allowance's worth of ordinary chat turns)
	// or of a single long-context request. A spill costs one prefill on
	// another replica; an engine whose running requests outgrow its KV
	// cache preempts and recomputes them and evicts every conversation's
	// prefix. Measured with 64k-token engines and with 400k-token ones
	// (docs/peers.md): 128 KiB beat 256 KiB on the agent workload (hit
	// rate 0.820 vs 0.763, TTFT p90 0.35 vs 0.69 s) and matched it on
	// shared-prefix and Mooncake; 512 KiB lost most of the gain. That is
	// half of the benchmark's 64k-token KV caches (256 KiB of text): with
	// 400k-token engines 512 KiB did better on Mooncake (README, Defaults).
	DefaultLoadAllowanceBytes = 128 << 10

	// DefaultPrefillRate is the default prefill_rate, in bytes of routing
	// text per second: 64 KiB/s is about 16,000 tokens/s at 4 bytes per
	// token, the prefill throughput of Llama-3-8B in vLLM on one H100
	// (and of the benchmark's simulated engine). On the Mooncake trace
	// (8 engines, docs/peers.md) it cut TTFT p90 from 2.48 to 2.19 s and
	// p50 from 0.70 to 0.61 s, the hit rate within the runs' spread; half
	// and twice the rate measured the same within that spread.
	DefaultPrefillRate = 64 << 10
)

// PrefixCacheSelection is a reverse_proxy selection policy for fleets of LLM
// inference engines (vLLM, SGLang, TensorRT-LLM, llama.cpp, anything OpenAI- or
// Anthropic-compatible). It reads the JSON request body, hashes the prompt's
// prefix in fixed-size chunks, and sends the request to the available
// upstream that most likely holds the longest prefix of it in its KV cache,
// unless that upstream's in-flight load is above a bound, in which case the
// request spills to the next-deepest holder. A request with no useful match
// goes to the rendezvous-hash winner of a placement key taken from the
// request alone (for chat, the conversation through its first user
// message), so that independent Caddy instances agree, unless that winner
// is busier than the mean (cold_load_factor).
//
// The request body always reaches the upstream byte for byte. Requests the
// policy cannot read (not POST, not JSON, larger than max_body, compressed,
// of an unknown shape) go to the fallback policy.
type PrefixCacheSelection struct {
	// Bytes of routing text per chunk. Default: `256`.
	ChunkSize int `json:"chunk_size,omitempty"`

	// Most chunks hashed per request; text beyond them is not matched.
	// Default: `2048` (512 KiB of text, about 128k tokens).
	MaxChunks int `json:"max_chunks,omitempty"`

	// Most prefixes the index remembers across all upstreams; the least
	// recently used are forgotten first. Default: `1048576`.
	MaxEntries int `json:"max_entries,omitempty"`

	// Largest request body, in bytes, read to route on; larger bodies go to
	// the fallback policy. Default: `4194304` (4 MiB).
	MaxBody int64 `json:"max_body,omitempty"`

	// An upstream is over the load bound when its in-flight requests
	// exceed load_factor times the mean plus load_allowance.
	// Default: `1.25`.
	LoadFactor float64 `json:"load_factor,omitempty"`

	// In-flight requests an upstream may carry above load_factor times the
	// mean before the bound moves requests away from it, so affinity is not
	// broken at low load. Default: `16`.
	LoadAllowance *int `json:"load_allowance,omitempty"`

	// Prompt bytes (of routing text) an upstream may have in flight above
	// load_factor times the mean before the bound moves requests away from
	// it; 0 turns the byte bound off, leaving the request bound alone.
	// Both bounds apply: an upstream is over the bound when it is over
	// either. Default: `131072` (128 KiB, about 32k tokens).
	LoadAllowanceBytes *int64 `json:"load_allowance_bytes,omitempty"`

	// A cold request (no upstream holds a useful prefix of it) goes to its
	// rendezvous-hash winner only if that upstream's in-flight requests
	// are also within cold_load_factor times the mean, with no allowance;
	// otherwise to the highest-ranked upstream that is. Moving a cold
	// request costs no cache (there is none), and new prompts placed by
	// hash alone land like balls in bins: some replicas get far more
	// prompt families than others and evict them. From 1 to load_factor;
	// 0 turns it off (cold requests get the bound warm ones do).
	// Default: `1`.
	ColdLoadFactor *float64 `json:"cold_load_factor,omitempty"`

	// How fast one upstream prefills, in bytes of routing text per
	// second; 0 turns the prefill backlog off. With it on, the policy
	// estimates each upstream's queued prefill (the uncached text of the
	// requests sent to it, drained at this rate, never more than the
	// uncached text still in flight there), and a cold request goes,
	// among the upstreams within the bound and the cold bound, to the one
	// with the least queued rather than behind another long prefill. A
	// warm request is never moved by it. An idle fleet has no queue and
	// routes exactly as with it off. Set it near the engines' prefill
	// throughput (tokens per second x ~4). Default: `65536` (64 KiB/s,
	// about 16k tokens/s).
	PrefillRate *int64 `json:"prefill_rate,omitempty"`

	// Shortest matched prefix, in bytes of routing text, worth routing on;
	// a shorter match is treated as no match. Default: `1024`.
	MinMatch int `json:"min_match,omitempty"`

	// Shortest matched prefix worth routing on, as a fraction of the
	// request's hashed routing text, from 0 to 1: a match that is both at
	// least min_match bytes and at least this share of the prompt counts.
	// A long request that shares only a short preamble (a common system
	// prompt) with what a replica holds is placed as a new conversation
	// instead of herding onto the preamble's holders. 0 turns it off.
	// Default: `0.3` (SGLang's cache_threshold).
	MinMatchRatio *float64 `json:"min_match_ratio,omitempty"`

	// A placeholder mixed into the hash seed so tenants never share index
	// entries, e.g. `{http.request.header.Authorization}`. The value is
	// hashed, never logged. Default: none.
	Tenant string `json:"tenant,omitempty"`

	// How long an upstream may be missing from every pool that uses the
	// index before the index forgets what it holds. Default: `1m`.
	ForgetAfter caddy.Duration `json:"forget_after,omitempty"`

	// The policy for requests this one cannot route on. Default:
	// `least_conn`.
	FallbackRaw json.RawMessage `json:"fallback,omitempty" caddy:"namespace=http.reverse_proxy.selection_policies inline_key=policy"`

	fallback  reverseproxy.Selector
	chunker   prefixindex.Chunker
	policy    selection.Policy
	nsPerByte float64 // 1s / prefill_rate; 0 when prefill_rate is off
	state     *sharedState
	lastPool  atomic.Pointer[reverseproxy.UpstreamPool]
	upstreams upstreamCache
	logger    *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (*PrefixCacheSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.prefix_cache",
		New: func() caddy.Module { return new(PrefixCacheSelection) },
	}
}

// Provision sets defaults, loads the fallback policy and attaches the
// index, which outlives this config when the next one keeps its shape.
func (s *PrefixCacheSelection) Provision(ctx caddy.Context) error {
	s.logger = ctx.Logger()
	if s.ChunkSize == 0 {
		s.ChunkSize = prefixindex.DefaultChunkSize
	}
	if s.MaxChunks == 0 {
		s.MaxChunks = prefixindex.DefaultMaxChunks
	}
	if s.MaxEntries == 0 {
		s.MaxEntries = prefixindex.DefaultMaxEntries
	}
	if s.MaxBody == 0 {
		s.MaxBody = DefaultMaxBody
	}
	if s.LoadFactor == 0 {
		s.LoadFactor = selection.DefaultLoadFactor
	}
	if s.LoadAllowance == nil {
		allowance := selection.DefaultAllowance
		s.LoadAllowance = &allowance
	}
	if s.LoadAllowanceBytes == nil {
		allowance := int64(DefaultLoadAllowanceBytes)
		s.LoadAllowanceBytes = &allowance
	}
	if s.ColdLoadFactor == nil {
		f := min(selection.DefaultColdLoadFactor, s.LoadFactor)
		s.ColdLoadFactor = &f
	}
	if s.PrefillRate == nil {
		rate := int64(DefaultPrefillRate)
		s.PrefillRate = &rate
	}
	if s.MinMatch == 0 {
		s.MinMatch = DefaultMinMatch
	}
	if s.MinMatchRatio == nil {
		ratio := DefaultMinMatchRatio
		s.MinMatchRatio = &ratio
	}
	if s.ForgetAfter == 0 {
		s.ForgetAfter = DefaultForgetAfter
	}

	if s.FallbackRaw == nil {
		s.FallbackRaw = caddyconfig.JSONModuleObject(reverseproxy.LeastConnSelection{}, "policy", "least_conn", nil)
	}
	mod, err := ctx.LoadModule(s, "FallbackRaw")
	if err != nil {
		return fmt.Errorf("loading fallback policy: %w", err)
	}
	s.fallback = mod.(reverseproxy.Selector)

	// Validate runs after Provision; the index must not be built from
	// values it would reject.
	if err := s.Validate(); err != nil {
		return err
	}

	s.chunker, err = prefixindex.NewChunker(s.ChunkSize, s.MaxChunks)
	if err != nil {
		return fmt.Errorf("chunk_size %d, max_chunks %d: %w", s.ChunkSize, s.MaxChunks, err)
	}
	s.policy = selection.Policy{
		LoadFactor:     s.LoadFactor,
		Allowance:      *s.LoadAllowance,
		MinDepth:       max(1, (s.MinMatch+s.ChunkSize-1)/s.ChunkSize),
		ByteAllowance:  *s.LoadAllowanceBytes,
		ColdLoadFactor: *s.ColdLoadFactor,
	}
	if rate := *s.PrefillRate; rate > 0 {
		s.policy.ColdBacklog = true
		s.nsPerByte = 1e9 / float64(rate)
	}
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	s.state, err = loadState(s.ChunkSize, s.MaxEntries, time.Duration(s.ForgetAfter))
	if err != nil {
		return err
	}
	addInstance(s)
	return nil
}

// Validate checks the configuration.
func (s *PrefixCacheSelection) Validate() error {
	switch {
	case s.ChunkSize < 1:
		return fmt.Errorf("chunk_size must be positive, got %d", s.ChunkSize)
	case s.MaxChunks < 1:
		return fmt.Errorf("max_chunks must be positive, got %d", s.MaxChunks)
	case s.MaxEntries < 1:
		return fmt.Errorf("max_entries must be positive, got %d", s.MaxEntries)
	case s.MaxBody < 1:
		return fmt.Errorf("max_body must be positive, got %d", s.MaxBody)
	case s.MinMatch < 1:
		return fmt.Errorf("min_match must be positive, got %d", s.MinMatch)
	case s.MinMatchRatio != nil && !(*s.MinMatchRatio >= 0 && *s.MinMatchRatio <= 1): // also rejects NaN
		return fmt.Errorf("min_match_ratio must be from 0 to 1, got %v", *s.MinMatchRatio)
	case s.ForgetAfter < 0:
		return fmt.Errorf("forget_after must not be negative, got %v", time.Duration(s.ForgetAfter))
	}
	if s.LoadAllowance != nil && *s.LoadAllowance < 0 {
		return fmt.Errorf("load_allowance must not be negative, got %d", *s.LoadAllowance)
	}
	if s.LoadAllowanceBytes != nil && *s.LoadAllowanceBytes < 0 {
		return fmt.Errorf("load_allowance_bytes must not be negative, got %d", *s.LoadAllowanceBytes)
	}
	if s.PrefillRate != nil && *s.PrefillRate < 0 {
		return fmt.Errorf("prefill_rate must not be negative, got %d", *s.PrefillRate)
	}
	// The remaining rules, load_factor and cold_load_factor, are the
	// choice's own; their messages name the same fields.
	p := selection.Policy{LoadFactor: s.LoadFactor, MinDepth: 1}
	if s.ColdLoadFactor != nil {
		p.ColdLoadFactor = *s.ColdLoadFactor
	}
	return p.Validate()
}

// Cleanup releases this config's hold on the shared index; the index is
// dropped when no config holds it any more.
func (s *PrefixCacheSelection) Cleanup() error {
	if s.state == nil {
		return nil
	}
	removeInstance(s)
	_, err := states.Delete(s.state.key)
	return err
}

// Select returns the available upstream most likely to hold the request's
// prompt prefix under the load bound, or asks the fallback policy when the
// request cannot be routed on. w may be nil.
func (s *PrefixCacheSelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, w http.ResponseWriter) *reverseproxy.Upstream {
	s.notePool(pool)
	req := s.route(r)
	if req.skip != skipNone {
		metrics.skipped(req.skip)
		setSkipPlaceholders(r, req.skip)
		return s.fallback.Select(pool, r, w)
	}
	chosen, d := s.choose(pool, req, true)
	if chosen == nil {
		return nil
	}
	uncached := int64(req.textLen - d.matched)
	req.charge.move(r.Context(), &s.state.inflight, &s.state.uncached, d.id, int64(req.textLen), uncached)
	if s.nsPerByte > 0 {
		s.state.prefill.add(d.id, time.Now().UnixNano(), uncached, s.nsPerByte)
	}
	metrics.selected(d)
	setPlaceholders(r, d)
	if c := s.logger.Check(zapcore.DebugLevel, "prefix_cache selected upstream"); c != nil {
		c.Write(
			zap.String("reason", d.reason),
			zap.String("dialect", d.dialect),
			zap.String("upstream", d.chosen),
			zap.String("preferred", d.preferred),
			zap.Int("matched_bytes", d.matched),
			zap.Int("prompt_bytes", d.promptBytes),
		)
	}
	return chosen
}

// choose picks among pool's available upstreams for a routable request and,
// when record is set, teaches the index that the chosen one now holds the
// request's prefix. It returns nil when no upstream is available.
func (s *PrefixCacheSelection) choose(pool reverseproxy.UpstreamPool, req *peeked, record bool) (*reverseproxy.Upstream, decision) {
	sc := getScratch()
	defer putScratch(sc)
	// On a retry, leave out the upstreams this request already failed on,
	// unless nothing else is available: Caddy counts a failure against an
	// upstream only when passive health checks are on, and the index
	// would send the request straight back.
	avoid := req.tried
	if len(avoid) > 0 && !anyAvailableExcept(pool, avoid) {
		avoid = nil
	}
	// IDs and rendezvous keys depend on the Dials alone: the cache keeps
	// them per pool instead of an Intern and a hash per upstream per request.
	tab := s.upstreams.table(s.state.index, pool)
	for i, u := range pool {
		if !u.Available() || slices.Contains(avoid, u.Dial) {
			continue
		}
		id := tab.ids[i]
		if id == 0 {
			// Only with more distinct upstreams than IDs: route without
			// this one rather than fail the request.
			continue
		}
		sc.ups = append(sc.ups, u)
		sc.ids = append(sc.ids, id)
		sc.cands = append(sc.cands, selection.Candidate{Key: tab.keys[i]})
	}
	if len(sc.ups) == 0 {
		return nil, decision{}
	}
	sc.depths = grow(sc.depths, len(sc.ids))
	s.state.index.Depths(prefixindex.Scope{}, req.hashes, sc.ids, sc.depths)
	var now int64
	if s.nsPerByte > 0 {
		now = time.Now().UnixNano()
	}
	for j, u := range sc.ups {
		id := sc.ids[j]
		sc.cands[j].Depth = sc.depths[j]
		sc.cands[j].Load = u.NumRequests()
		sc.cands[j].Bytes = s.state.inflight.load(id)
		if s.nsPerByte > 0 {
			sc.cands[j].Backlog = s.backlog(id, now)
		}
	}

	policy := s.policy
	if r := *s.MinMatchRatio; r > 0 {
		policy.MinDepth = max(policy.MinDepth, int(math.Ceil(r*float64(len(req.hashes)))))
	}
	choice := policy.Choose(sc.cands, req.placement, int64(req.textLen))
	chosen := sc.ups[choice.Index]
	if record {
		s.state.index.Record(prefixindex.Scope{}, req.hashes, sc.ids[choice.Index])
		req.tried = append(req.tried, chosen.Dial)
	}
	return chosen, decision{
		reason:      choice.Reason.String(),
		dialect:     req.dialect,
		promptBytes: req.textLen,
		matched:     min(sc.cands[choice.Index].Depth*s.ChunkSize, req.textLen),
		chosen:      chosen.Dial,
		preferred:   sc.ups[choice.Preferred].Dial,
		spilled:     choice.Spilled,
		bound:       choice.Bound,
		byteBound:   choice.ByteBound,
		coldBound:   choice.ColdBound,
		id:          sc.ids[choice.Index],
	}
}

// backlog is the prefill queued at id at time now, as cold placement
// reads it: the fluid estimate, capped by the uncached bytes in flight.
func (s *PrefixCacheSelection) backlog(id prefixindex.ID, now int64) int64 {
	return min(s.state.prefill.load(id, now, s.nsPerByte), s.state.uncached.load(id))
}

// anyAvailableExcept reports whether pool has an available upstream whose
// Dial is not in avoid.
func anyAvailableExcept(pool reverseproxy.UpstreamPool, avoid []string) bool {
	for _, u := range pool {
		if u.Available() && !slices.Contains(avoid, u.Dial) {
			return true
		}
	}
	return false
}

// grow returns s resized to n, reusing its storage when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Interface guards
var (
	_ caddy.Provisioner     = (*PrefixCacheSelection)(nil)
	_ caddy.Validator       = (*PrefixCacheSelection)(nil)
	_ caddy.CleanerUpper    = (*PrefixCacheSelection)(nil)
	_ reverseproxy.Selector = (*PrefixCacheSelection)(nil)
)
