// Package caddymodule is the Caddy adapter of the prefix_cache load-balancing
// policy: the module and its configuration (JSON and Caddyfile), the
// request-body peek and its memory budget, the placeholders it sets, its
// metrics and admin API, the state it keeps across config reloads, and
// the I/O of the signals it routes by: the scrapes of the engines'
// metrics, the answers' usage, and the sync transport between edges.
//
// The algorithm lives elsewhere: dialect turns a request body into
// routing text, prefixindex hashes that text into chained chunk hashes and
// remembers which upstream holds which prefix, fleet keeps what this edge
// knows of each upstream's load (in flight, queued prefill and its speed,
// the other edges' reports, the engines' metrics and answers), and
// selection makes the choice. This package moves bytes and signals
// between Caddy and those packages; what it keeps across reloads is an
// index and its fleet, per index shape.
package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/fleet"
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
	// cache_threshold of SGLang's cache-aware router. Without a ratio, a
	// long new conversation that shares only a common system prompt
	// counts as a match, and every such conversation herds onto that
	// prompt's holders; the ratio, unlike an absolute min_match, needs no
	// sizing to each deployment's preamble (docs/tuning.md, "Defaults and
	// the evidence", has the measurements).
	DefaultMinMatchRatio = 0.3

	// DefaultLoadAllowanceBytes is the default load_allowance_bytes:
	// 128 KiB of routing text, about 32k tokens, the size of 16 requests
	// of 2k tokens (the request allowance's worth of ordinary chat turns)
	// or of a single long-context request. A spill costs one prefill on
	// another replica; an engine whose running requests outgrow its KV
	// cache preempts and recomputes them and evicts every conversation's
	// prefix: counted in requests alone, an engine holding long agent
	// contexts looks lightly loaded while its KV cache overflows. 128 KiB
	// is half of a 64k-token engine's KV cache in bytes of text; engines
	// with larger caches want a third to a half of one engine's KV
	// (docs/tuning.md, "Defaults and the evidence", has the measurements
	// on both sizes).
	DefaultLoadAllowanceBytes = 128 << 10

	// DefaultPrefillRate is the default prefill_rate, in bytes of routing
	// text per second: 64 KiB/s is about 16,000 tokens/s at 4 bytes per
	// token, the prefill throughput of Llama-3-8B in vLLM on one H100
	// (and of the benchmark's simulated engine). The estimate only ranks
	// upstreams by their queued prefill, so a rate off by a factor of two
	// either way keeps most of what it gains (docs/tuning.md, "Defaults
	// and the evidence", has the measurements).
	DefaultPrefillRate = 64 << 10

	// ChoiceCost and ChoiceRules are the values of choice: one predicted
	// cost for every request, the default, or the rules for each case
	// that chose before it, kept so that a fleet tuned on them can stay
	// there and the race (bench/scoring) can weigh the two. The cost
	// leads the rules on time to first token on the tuning set at about
	// their hit rate (docs/tuning.md, "choice: cost").
	ChoiceCost  = "cost"
	ChoiceRules = "rules"

	// DefaultTenantShare is the default tenant_share: a quarter of the
	// index (4 of its 16 shards) per tenant. The default index holds
	// ~1M prefixes, far more than a fleet's KV caches (8 engines of 64k
	// tokens hold ~8k chunks), so a quarter is room enough for any one
	// tenant, and a tenant flooding unique prompts evicts at most a
	// quarter of everyone else's affinity.
	DefaultTenantShare = 0.25
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
// message), so that independent Caddy instances agree. Among the
// upstreams under the bound, the request goes to the one with the least
// predicted time to first token (the prefill queued there plus the
// request's own uncached prefill, prefill_rate) plus the cached prefix it
// would give up (cache_weight); on a tie, or an idle fleet, it stays
// home.
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

	// Most bytes the request-body buffers of every prefix_cache policy in
	// the process may hold at once, counted at their allocated size times
	// the garbage collector's headroom (1 + GOGC/100: twice, by default); a
	// body that would take them past it is not read (or, arriving without
	// a length, stops being read) and goes to the fallback policy,
	// untouched. Default: an eighth of the process's memory limit
	// (GOMEMLIMIT, which Caddy sets to 90% of the container's or the
	// machine's memory), at least 16 MiB and at most `268435456`
	// (256 MiB).
	BodyBudget int64 `json:"body_budget,omitempty"`

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

	// With choice rules, a cold request (no upstream holds a useful
	// prefix of it) goes to its rendezvous-hash winner only if that
	// upstream's in-flight requests are also within cold_load_factor
	// times the mean, with no allowance; otherwise to the highest-ranked
	// upstream that is. Moving a cold request costs no cache (there is
	// none), and new prompts placed by hash alone land like balls in
	// bins: some replicas get far more prompt families than others and
	// evict them. From 1 to load_factor; 0 turns it off (cold requests
	// get the bound warm ones do). Default: `1`.
	ColdLoadFactor *float64 `json:"cold_load_factor,omitempty"`

	// How fast one upstream prefills, in bytes of routing text per
	// second; 0 turns the prefill backlog off. With it on, the policy
	// estimates each upstream's queued prefill (the uncached text of the
	// requests sent to it, drained at this rate, never more than the
	// uncached text still in flight there). With choice cost, that is the
	// queue ahead of a request, and this rate the speed of its own
	// prefill. With choice rules, a cold request goes, among the
	// upstreams within the bound and the cold bound, to the one with the
	// least queued rather than behind another long prefill, and a warm
	// request is never moved by it. An idle fleet has no queue and routes
	// exactly as with it off. Set it near the engines' prefill throughput
	// (tokens per second x ~4). Default: `65536` (64 KiB/s, about 16k
	// tokens/s).
	PrefillRate *int64 `json:"prefill_rate,omitempty"`

	// How the upstream is chosen: `cost`, every request to the upstream
	// under the bound with the least predicted time to first token (its
	// queued prefill plus the request's own uncached prefill, at
	// prefill_rate or the engine's measured speed) plus cache_weight
	// times the prefill a move off its home (the deepest holder under
	// the bound, else its rendezvous-hash winner) throws away, home
	// winning a tie; or `rules` (the deepest holder under the bound, cold
	// requests by rendezvous hashing, cold_load_factor and the prefill
	// backlog). While the edge's sync channel is down, the cost leaves
	// home only on a saving no edge's private share of the queues makes
	// up, so that edges place alike without talking. With prefill_rate
	// off the cost sees no queue: the deepest holder under the bound,
	// else the rendezvous-hash winner. With `cost`, cold_load_factor is
	// not read. Default: `cost`.
	Choice string `json:"choice,omitempty"`

	// With choice cost, how much the prefix a request gives up by moving
	// weighs against the time to first token it saves, as a multiple of
	// that prefix's prefill time: 0 moves a request as soon as its
	// predicted time to first token is less elsewhere, larger values keep
	// conversations on their holders. Finite and at least 0. Default: `2`.
	CacheWeight *float64 `json:"cache_weight,omitempty"`

	// Shortest matched prefix, in bytes of routing text, worth routing on;
	// a shorter match is treated as no match. Default: `1024`.
	MinMatch int `json:"min_match,omitempty"`

	// Shortest matched prefix worth routing on, as a fraction of the
	// request's hashed routing text, from 0 to 1: a match that is both at
	// least min_match bytes and at least this share of the prompt counts.
	// A long request that shares only a short preamble (a common system
	// prompt) with what a replica holds is placed as a new conversation
	// instead of herding onto the preamble's holders. A match that
	// covers the request's placement text (for chat, through the first
	// user message) counts whatever its share: that holder has this
	// conversation. 0 turns it off.
	// Default: `0.3` (SGLang's cache_threshold).
	MinMatchRatio *float64 `json:"min_match_ratio,omitempty"`

	// A placeholder whose value names the request's tenant, e.g. an
	// authenticated identity `{http.auth.user.id}`. It is mixed into the
	// hash seed, so tenants never share index entries, and each tenant's
	// entries live in tenant_share of the index. A request whose value is
	// empty goes to the fallback policy unless allow_empty_tenant is set.
	// The value is hashed, never logged. Default: none.
	Tenant string `json:"tenant,omitempty"`

	// A secret the edges of a tier share that keys the chunk hashes and
	// the tenant scopes, so that a reader of the sync channel cannot hash
	// guessed prompts or tenant values and look for them in what it
	// reads. At least 16 bytes; give it as a placeholder such as
	// `{env.PREFIX_CACHE_HASH_KEY}`, so that the configuration (and the
	// admin API's copy of it) holds the placeholder, not the secret. It is
	// never logged. Every edge of a tier needs the same key; changing it
	// starts routing over, as a new index would. Default: none (unkeyed).
	HashKey string `json:"hash_key,omitempty"`

	// With tenant set, route requests whose tenant value is empty too, as
	// one tenant of their own (all anonymous clients share it). Default:
	// `false` (they go to the fallback policy).
	AllowEmptyTenant bool `json:"allow_empty_tenant,omitempty"`

	// With tenant set, the share of the index one tenant's entries may
	// occupy (rounded up to whole shards of the index's 16), so that no
	// tenant can evict more than this of the others' affinity, however
	// much it sends. From 0 to 1; 1 lets every tenant use the whole index.
	// Default: `0.25`.
	TenantShare *float64 `json:"tenant_share,omitempty"`

	// How long an upstream may be missing from every pool that uses the
	// index before the index forgets what it holds. Default: `1m`.
	ForgetAfter caddy.Duration `json:"forget_after,omitempty"`

	// The policy for requests this one cannot route on. Default:
	// `least_conn`.
	FallbackRaw json.RawMessage `json:"fallback,omitempty" caddy:"namespace=http.reverse_proxy.selection_policies inline_key=policy"`

	// Share placements with the other edges of a tier through this
	// transport (a module of the http.prefix_cache.sync namespace, e.g.
	// `{"transport": "redis", "url": "redis://10.0.0.5:6379"}`), so that
	// every edge routes as if it had seen every request. Without it, or
	// while the transport is down, each edge routes on what it learned
	// alone. Default: none.
	SyncRaw json.RawMessage `json:"sync,omitempty" caddy:"namespace=http.prefix_cache.sync inline_key=transport"`

	// Scrape each upstream's own Prometheus endpoint in the background
	// (vLLM, SGLang, TGI or llama.cpp's server), through the
	// reverse_proxy's transport, and bound each upstream by its engine's
	// running and waiting requests, which count every edge's and every
	// client's. A failed, stale or unrecognised scrape leaves that
	// upstream bounded by this Caddy's view alone. Default: off.
	EngineMetrics *EngineMetrics `json:"engine_metrics,omitempty"`

	// Which hashes of a request a sync message carries: `all`, or `new`
	// (those past what the chosen upstream was believed to hold, and at
	// least the deepest). Default: `all`.
	SyncHashes string `json:"sync_hashes,omitempty"`

	// Whether the edges also share their load: each publishes its
	// requests in flight and the uncached text it sent per upstream
	// every 100 ms, and at once (at most once a millisecond) after a
	// request that queued prefill; each bounds an upstream by the whole
	// tier's requests and estimates its prefill queue (prefill_rate)
	// from them. Off, each edge counts its own (and, with
	// engine_metrics, bounds by the engines' queues). Default: `true`
	// (with sync).
	SyncLoad *bool `json:"sync_load,omitempty"`

	// How often an edge publishes its load, with sync_load; a report
	// counts for five of these. Default: `100ms`.
	SyncLoadInterval caddy.Duration `json:"sync_load_interval,omitempty"`

	fallback     reverseproxy.Selector
	fallbackName string
	chunker      prefixindex.Chunker
	keys         hashKeys // derived from hash_key; zero without it
	policy       selection.Policy
	state        *sharedState
	sync         *syncState // nil without sync
	scraper      *scraper   // nil without engine_metrics
	// fleetOptions is how this instance reads the state's fleet:
	// prefill_rate (NsPerByte, 0 when off), sync_load (Tier), and
	// engine_metrics' queue, prefill and staleness.
	fleetOptions fleet.Options
	reuse        handlerReuse          // when a retry may ask for a sent body again
	failures     dialFailures          // upstreams that requests could not reach lately (dialfail.go)
	staticDials  []string              // the handler's static upstreams, for the janitor
	id           uint64                // the admin API's instance number
	handler      *reverseproxy.Handler // the reverse_proxy above the policy, or nil
	server       *caddyhttp.Server     // the HTTP server it serves, or nil
	root         context.Context       // the config's context, to know when it runs
	lastPool     atomic.Pointer[reverseproxy.UpstreamPool]
	upstreams    upstreamCache
	logger       *zap.Logger
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
	if s.BodyBudget == 0 {
		s.BodyBudget = defaultBodyBudget()
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
	if s.Choice == "" {
		s.Choice = ChoiceCost
	}
	if s.CacheWeight == nil {
		w := selection.DefaultCacheWeight
		s.CacheWeight = &w
	}
	if s.MinMatch == 0 {
		s.MinMatch = DefaultMinMatch
	}
	if s.MinMatchRatio == nil {
		ratio := DefaultMinMatchRatio
		s.MinMatchRatio = &ratio
	}
	if s.TenantShare == nil {
		share := DefaultTenantShare
		s.TenantShare = &share
	}
	if s.ForgetAfter == 0 {
		s.ForgetAfter = DefaultForgetAfter
	}
	if s.SyncHashes == "" {
		s.SyncHashes = SyncHashesAll
	}
	if s.SyncLoad == nil {
		on := true
		s.SyncLoad = &on
	}
	if s.SyncLoadInterval == 0 {
		s.SyncLoadInterval = caddy.Duration(loadInterval)
	}
	if s.EngineMetrics != nil {
		s.EngineMetrics.provision()
	}

	if s.FallbackRaw == nil {
		s.FallbackRaw = caddyconfig.JSONModuleObject(reverseproxy.LeastConnSelection{}, "policy", "least_conn", nil)
	}
	var fb struct {
		Policy string `json:"policy"`
	}
	_ = json.Unmarshal(s.FallbackRaw, &fb)
	s.fallbackName = fb.Policy
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
	if s.keys, err = deriveHashKeys(s.HashKey); err != nil {
		return err
	}
	s.chunker.Key = s.keys.chain
	s.policy = selection.Policy{
		LoadFactor:     s.LoadFactor,
		Allowance:      *s.LoadAllowance,
		MinDepth:       max(1, (s.MinMatch+s.ChunkSize-1)/s.ChunkSize),
		ByteAllowance:  *s.LoadAllowanceBytes,
		ColdLoadFactor: *s.ColdLoadFactor,
		Cost:           s.Choice == ChoiceCost,
		ChunkSize:      s.ChunkSize,
		CacheWeight:    *s.CacheWeight,
	}
	s.fleetOptions = fleet.Options{Tier: *s.SyncLoad}
	if rate := *s.PrefillRate; rate > 0 {
		s.policy.ColdBacklog = true
		s.fleetOptions.NsPerByte = 1e9 / float64(rate)
		s.policy.NsPerByte = s.fleetOptions.NsPerByte
	}
	if m := s.EngineMetrics; m != nil {
		s.scraper = newScraper(ctx, m, s.logger)
		s.fleetOptions.EngineQueue = *m.Queue
		s.fleetOptions.EnginePrefill = m.Prefill && s.fleetOptions.NsPerByte > 0
		s.fleetOptions.EngineStale = staleScrapes*time.Duration(m.Interval) + time.Duration(m.Timeout)
		s.fleetOptions.BytesPerToken = m.BytesPerToken
	}
	h := handlerOf(ctx)
	if h != nil && len(h.Upstreams) == 0 && h.DynamicUpstreams == nil && h.DynamicUpstreamsRaw == nil {
		// Caddy accepts it and answers every request with an empty 503.
		return fmt.Errorf("the reverse_proxy has no upstreams and no dynamic upstreams: every request would fail")
	}
	if h != nil && h.LoadBalancing != nil && h.LoadBalancing.TryDuration > 0 && h.RequestBuffers == 0 {
		// Caddy starts the clock before Select, which reads the body.
		s.logger.Warn("lb_try_duration's clock runs while the policy reads the request body: a slow upload spends the time a retry after a dial error needs; set request_buffers (Caddy then reads the body first), or use lb_retries",
			zap.Duration("lb_try_duration", time.Duration(h.LoadBalancing.TryDuration)))
	}
	s.handler, s.root = h, ctx.Context
	s.server, _ = ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	s.reuse = handlerReuseOf(h)
	s.staticDials = staticDialsOf(h)
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	var kept bool
	s.state, kept, err = loadState(s.ChunkSize, s.MaxEntries)
	if err != nil {
		return err
	}
	if m := s.EngineMetrics; m != nil && m.Capacity {
		// The clocks run from now, for every upstream, so that answers
		// can teach the capacity of an engine that publishes none.
		s.state.index.TrackCapacities()
	}
	if s.SyncRaw != nil || s.EngineMetrics != nil {
		// Static upstreams get their IDs now, so that placements from
		// other edges and engines' scrapes apply before this one has
		// routed a request.
		if _, err := s.state.index.InternAll(s.staticDials, nil); err != nil {
			return fmt.Errorf("interning upstreams: %w", err)
		}
	}
	if s.SyncRaw != nil {
		mod, err := ctx.LoadModule(s, "SyncRaw")
		if err != nil {
			return fmt.Errorf("loading sync transport: %w", err)
		}
		t, ok := mod.(edgesync.Transport)
		if !ok {
			return fmt.Errorf("sync: module %T is not an edgesync.Transport", mod)
		}
		s.startSync(t)
	}
	// Only now: other goroutines read s.sync from the list of instances.
	addInstance(s)
	s.startLoadReports()
	s.startScraping() // scrapes begin once the config runs, not at its first request
	s.logProvisioned(kept)
	return nil
}

// logProvisioned says, once per config load, what the policy will do: its
// effective settings, and whether it kept a learned index.
func (s *PrefixCacheSelection) logProvisioned(kept bool) {
	st := s.state.index.Stats()
	index := "created"
	if kept {
		index = "kept from the running config"
	}
	s.logger.Info("prefix_cache policy ready",
		zap.Uint64("instance", s.id),
		zap.String("index", s.state.key),
		zap.String("index_state", index),
		zap.Int("index_entries", st.Entries),
		zap.Int("chunk_size", s.ChunkSize),
		zap.Int("max_chunks", s.MaxChunks),
		zap.Int("max_entries", s.MaxEntries),
		zap.Int64("max_body", s.MaxBody),
		zap.Int64("body_budget", s.BodyBudget),
		zap.Float64("load_factor", s.LoadFactor),
		zap.Int("load_allowance", *s.LoadAllowance),
		zap.Int64("load_allowance_bytes", *s.LoadAllowanceBytes),
		zap.Float64("cold_load_factor", *s.ColdLoadFactor),
		zap.Int64("prefill_rate", *s.PrefillRate),
		zap.String("choice", s.Choice),
		zap.Float64("cache_weight", *s.CacheWeight),
		zap.Int("min_match", s.MinMatch),
		zap.Float64("min_match_ratio", *s.MinMatchRatio),
		zap.Bool("tenant", s.Tenant != ""),
		zap.Bool("hash_key", s.HashKey != ""),
		zap.Float64("tenant_share", *s.TenantShare),
		zap.Bool("allow_empty_tenant", s.AllowEmptyTenant),
		zap.Duration("forget_after", time.Duration(s.ForgetAfter)),
		zap.Bool("engine_metrics", s.EngineMetrics != nil),
		zap.Bool("engine_queue", s.fleetOptions.EngineQueue),
		zap.Bool("engine_prefill", s.fleetOptions.EnginePrefill),
		zap.Bool("engine_capacity", s.EngineMetrics != nil && s.EngineMetrics.Capacity),
		zap.Bool("sync_load", s.sync != nil && *s.SyncLoad), // SyncRaw is nil once loaded
		zap.Duration("sync_load_interval", time.Duration(s.SyncLoadInterval)),
		zap.String("fallback", s.fallbackName),
		zap.Bool("body_kept_for_retries", s.reuse.retryAfterRead || !s.reuse.known),
	)
}

// Validate checks the configuration.
func (s *PrefixCacheSelection) Validate() error {
	switch {
	case s.ChunkSize < 1 || s.ChunkSize > maxSize:
		return fmt.Errorf("chunk_size must be from 1 to %d, got %d", maxSize, s.ChunkSize)
	case s.MaxChunks < 1 || s.MaxChunks > maxSize:
		return fmt.Errorf("max_chunks must be from 1 to %d, got %d", maxSize, s.MaxChunks)
	case s.MaxEntries < 1 || s.MaxEntries > maxMaxEntries:
		return fmt.Errorf("max_entries must be from 1 to %d, got %d", maxMaxEntries, s.MaxEntries)
	case s.MaxBody < 1 || s.MaxBody > maxSize:
		return fmt.Errorf("max_body must be from 1 byte to 1TiB, got %d", s.MaxBody)
	case s.BodyBudget < 0 || s.BodyBudget > maxSize:
		return fmt.Errorf("body_budget must be from 0 to 1TiB, got %d", s.BodyBudget)
	case s.MinMatch < 1 || s.MinMatch > maxSize:
		return fmt.Errorf("min_match must be from 1 to %d, got %d", maxSize, s.MinMatch)
	case s.MinMatchRatio != nil && !(*s.MinMatchRatio >= 0 && *s.MinMatchRatio <= 1): // also rejects NaN
		return fmt.Errorf("min_match_ratio must be from 0 to 1, got %v", *s.MinMatchRatio)
	case s.TenantShare != nil && !(*s.TenantShare >= 0 && *s.TenantShare <= 1):
		return fmt.Errorf("tenant_share must be from 0 to 1, got %v", *s.TenantShare)
	case s.ForgetAfter != 0 && s.ForgetAfter < MinForgetAfter:
		return fmt.Errorf("forget_after must be at least %v, got %v", time.Duration(MinForgetAfter), time.Duration(s.ForgetAfter))
	case s.ForgetAfter > MaxForgetAfter:
		return fmt.Errorf("forget_after must be at most %v, got %v", time.Duration(MaxForgetAfter), time.Duration(s.ForgetAfter))
	case s.AllowEmptyTenant && s.Tenant == "":
		return fmt.Errorf("allow_empty_tenant needs tenant")
	case s.SyncLoadInterval != 0 && (time.Duration(s.SyncLoadInterval) < minLoadInterval || time.Duration(s.SyncLoadInterval) > maxLoadInterval):
		return fmt.Errorf("sync_load_interval must be from %v to %v, got %v", minLoadInterval, maxLoadInterval, time.Duration(s.SyncLoadInterval))
	case s.Choice != "" && s.Choice != ChoiceRules && s.Choice != ChoiceCost:
		return fmt.Errorf("choice must be %s or %s, got %q", ChoiceCost, ChoiceRules, s.Choice)
	case s.SyncHashes != "" && s.SyncHashes != SyncHashesAll && s.SyncHashes != SyncHashesNew:
		return fmt.Errorf("sync_hashes must be %s or %s, got %q", SyncHashesAll, SyncHashesNew, s.SyncHashes)
	}
	if s.LoadAllowance != nil && *s.LoadAllowance < 0 {
		return fmt.Errorf("load_allowance must not be negative, got %d", *s.LoadAllowance)
	}
	if s.LoadAllowanceBytes != nil && (*s.LoadAllowanceBytes < 0 || *s.LoadAllowanceBytes > maxSize) {
		return fmt.Errorf("load_allowance_bytes must be from 0 to 1TiB, got %d", *s.LoadAllowanceBytes)
	}
	if s.PrefillRate != nil && (*s.PrefillRate < 0 || *s.PrefillRate > maxSize) {
		return fmt.Errorf("prefill_rate must be from 0 to 1TiB per second, got %d", *s.PrefillRate)
	}
	if s.EngineMetrics != nil {
		if err := s.EngineMetrics.validate(); err != nil {
			return err
		}
		if s.EngineMetrics.Prefill && s.PrefillRate != nil && *s.PrefillRate == 0 {
			return fmt.Errorf("engine_metrics: prefill measures what prefill_rate estimates; it needs prefill_rate, which is off")
		}
	}
	// The remaining rules, load_factor, cold_load_factor and
	// cache_weight, are the choice's own; their messages name the same
	// fields.
	p := selection.Policy{LoadFactor: s.LoadFactor, MinDepth: 1}
	if s.ColdLoadFactor != nil {
		p.ColdLoadFactor = *s.ColdLoadFactor
	}
	if s.CacheWeight != nil {
		p.CacheWeight = *s.CacheWeight
	}
	return p.Validate()
}

// maxSize bounds every size option, and chunk_size, max_chunks and
// min_match: 1 TiB, far above any real one, and far below where byte
// arithmetic could overflow.
const maxSize = 1 << 40

// maxMaxEntries bounds max_entries: 2^32 prefixes, 4096 times the
// default and far above what a fleet's KV caches hold, below the index's
// own limit (2^30 per shard of its 16).
const maxMaxEntries = 1 << 32

// Cleanup releases this config's hold on the shared index; the index is
// dropped when no config holds it any more. It tolerates a partial
// Provision.
func (s *PrefixCacheSelection) Cleanup() error {
	if s.state == nil {
		return nil
	}
	s.stopSync()
	s.stopScraping()
	removeInstance(s)
	s.releaseCapacities()
	_, err := states.Delete(s.state.key)
	return err
}

// Select returns the available upstream most likely to hold the request's
// prompt prefix under the load bound, or asks the fallback policy when the
// request cannot be routed on. w may be nil.
func (s *PrefixCacheSelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, w http.ResponseWriter) *reverseproxy.Upstream {
	s.notePool(pool)
	p, v := s.route(r)
	if v != nil {
		if v.attempts > 0 && p.buf.keepsAfterSent() {
			// A retry that may come after the body was sent
			// (lb_retry_match), routed or not: the upstream gets the
			// whole body again, from a replay of its own, while a
			// transport of the failed attempt may still be reading the
			// old one.
			if again := p.replay.again(); again != nil {
				r.Body = again
			}
		}
		if v.attempts > 0 && len(v.tried) > 0 {
			// A retry: the attempt before failed at its upstream.
			s.failures.failed(v.tried[len(v.tried)-1], time.Now().UnixNano())
		}
		v.attempts++
	}
	switch {
	case v == nil:
		return s.fallBack(pool, r, w, p.skip)
	case v.skip != skipNone:
		return s.fallBack(pool, r, w, v.skip)
	}
	chosen, d, indexed := s.choose(pool, v, true)
	if chosen == nil {
		if !indexed {
			return s.fallBack(pool, r, w, skipUnindexed)
		}
		return nil
	}
	// settle confirms on the status this attempt's round trip sets. Caddy
	// never clears it, so what an earlier handler (forward_auth is a
	// reverse_proxy) or an earlier attempt left must not count for this one.
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Delete("http.reverse_proxy.status_code")
	}
	uncached := int64(v.textLen - d.matched)
	from := s.syncFrom(d.depth)
	var now int64
	if s.fleetOptions.NsPerByte > 0 {
		now = time.Now().UnixNano()
	}
	v.charge.place(s, d.id, d.chosen, from, now, int64(v.textLen), uncached)
	v.age, v.aged = d.age, d.aged
	s.publish(edgesync.Placed, v, d.chosen, from)
	if uncached > 0 && s.sharesLoad() {
		s.state.askReport()
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

// fallBack asks the fallback policy for an upstream for a request the
// policy does not route on, and says so in the placeholders and metrics.
func (s *PrefixCacheSelection) fallBack(pool reverseproxy.UpstreamPool, r *http.Request, w http.ResponseWriter, cause skipCause) *reverseproxy.Upstream {
	metrics.skipped(cause)
	u := s.fallback.Select(pool, r, w)
	setFallbackPlaceholders(r, cause, u)
	return u
}

// settle runs when the request is over: it gives back the request's share
// of the byte bound and, when the upstream its last attempt chose answered
// with a 2xx status, confirms that upstream's hold on the prompt's prefix,
// so that its entries are protected from traffic that is never confirmed
// (prefixindex.Confirm). The status is Caddy's
// {http.reverse_proxy.status_code}, set after each round trip that got a
// response; Select clears it when it chooses, so it is the chosen
// attempt's or none.
func (v *view) settle(repl *caddy.Replacer) {
	id, dial, from := v.charge.settle()
	if id == 0 {
		return
	}
	var status int
	if repl != nil {
		if code, ok := repl.Get("http.reverse_proxy.status_code"); ok {
			status, _ = code.(int)
		}
	}
	if status < 200 || status > 299 {
		metrics.settled(false)
		return
	}
	v.owner.state.index.Confirm(v.scope, v.hashes, id)
	metrics.settled(true)
	v.owner.publish(edgesync.Confirmed, v, dial, from)
}

// choose picks among pool's available upstreams for a routable request
// and, when record is set, teaches the index that the chosen one now holds
// the request's prefix; without record (a dry run) it changes nothing, not
// even the upstreams' IDs. It returns nil when no upstream is available,
// with indexed false when some are but none has an index ID.
func (s *PrefixCacheSelection) choose(pool reverseproxy.UpstreamPool, v *view, record bool) (*reverseproxy.Upstream, decision, bool) {
	sc := getScratch()
	defer putScratch(sc)
	// On a retry, leave out the upstreams this request already failed on,
	// unless nothing else is available: Caddy counts a failure against an
	// upstream only when passive health checks are on, and the index
	// would send the request straight back.
	avoid := v.tried
	if s.failures.n.Load() > 0 {
		// And those other requests failed on lately (dialfail.go).
		avoid = append(s.failures.recent(time.Now().UnixNano()), avoid...)
	}
	if len(avoid) > 0 && !anyAvailableExcept(pool, avoid) {
		avoid = nil
	}
	// IDs and rendezvous keys depend on the Dials alone: the cache keeps
	// them per pool instead of an Intern and a hash per upstream per request.
	var tab *upstreamTable
	if record {
		tab = s.upstreams.table(s.state.index, pool)
	} else {
		tab = s.upstreams.peek(s.state.index, pool)
	}
	now := s.state.now()
	unindexed := false
	for i, u := range pool {
		if !u.Available() {
			s.failures.forget(u.Dial)
			continue
		}
		if slices.Contains(avoid, u.Dial) {
			continue
		}
		id := tab.ids[i]
		if id == 0 {
			// Only with more distinct upstreams than IDs (or, in a dry
			// run, one never routed to): route without this one rather
			// than fail the request.
			unindexed = true
			continue
		}
		if record {
			s.state.markSeen(id, now)
		}
		sc.ups = append(sc.ups, u)
		sc.ids = append(sc.ids, id)
		sc.cands = append(sc.cands, selection.Candidate{Key: tab.keys[i]})
	}
	if len(sc.ups) == 0 {
		return nil, decision{}, !unindexed
	}
	sc.depths = grow(sc.depths, len(sc.ids))
	s.state.index.Depths(v.scope, v.hashes, sc.ids, sc.depths)
	var nowNS int64
	if s.fleetOptions.NsPerByte > 0 || s.fleetOptions.EngineQueue {
		nowNS = time.Now().UnixNano()
	}
	for j, u := range sc.ups {
		st := s.state.fleet.Read(sc.ids[j], u.Dial, nowNS, &s.fleetOptions)
		own := u.NumRequests()
		// What the other edges report counts only as far as this edge's
		// own load there makes it plausible (fleet.RemoteRatio), and
		// their queue less where the request holds a prefix.
		st = s.state.fleet.Counted(st, sc.ids[j], u.Dial, nowNS, own, int64(v.textLen), sc.depths[j] > 0, &s.fleetOptions)
		sc.cands[j].Depth = sc.depths[j]
		sc.cands[j].Load = own + st.RemoteRequests
		sc.cands[j].Bytes = st.Bytes + st.RemoteBytes
		sc.cands[j].Backlog = st.Queued
		if s.policy.Cost {
			// The queue's speed: the engine's measured one while fresh.
			sc.cands[j].NsPerByte = st.NsPerByte
		}
	}

	policy := s.policy
	policy.Sticky = s.partitioned()
	if r := *s.MinMatchRatio; r > 0 {
		depth := int(math.Ceil(r * float64(len(v.hashes))))
		// A holder of the whole placement text (for chat, through the
		// first user message) holds this conversation, not a preamble
		// other conversations share: its match counts whatever share of
		// the prompt it is. Otherwise a conversation whose answers
		// outgrow its history, and one placed off its rendezvous home
		// (by the bounds, the backlog or a failover), went cold again
		// and moved on its next turn, prefilling its history anew.
		depth = min(depth, max(1, v.placementLen/s.ChunkSize))
		policy.MinDepth = max(policy.MinDepth, depth)
	}
	choice := policy.Choose(sc.cands, v.placement, int64(v.textLen))
	chosen := sc.ups[choice.Index]
	var age uint32
	var aged bool
	if depth := sc.cands[choice.Index].Depth; depth > 0 && s.EngineMetrics != nil && s.EngineMetrics.Capacity {
		// Before Record refreshes it: how long ago the matched prefix
		// was last sent there, for learning from the answer.
		age, aged = s.state.index.Age(v.scope, v.hashes[depth-1], sc.ids[choice.Index])
	}
	if record {
		s.state.index.Record(v.scope, v.hashes, sc.ids[choice.Index])
		v.tried = append(v.tried, chosen.Dial)
	}
	return chosen, decision{
		reason:      choice.Reason.String(),
		dialect:     v.dialect,
		promptBytes: v.textLen,
		matched:     min(sc.cands[choice.Index].Depth*s.ChunkSize, v.textLen),
		depth:       sc.cands[choice.Index].Depth,
		chosen:      chosen.Dial,
		preferred:   sc.ups[choice.Preferred].Dial,
		spilled:     choice.Spilled,
		bound:       choice.Bound,
		byteBound:   choice.ByteBound,
		coldBound:   choice.ColdBound,
		id:          sc.ids[choice.Index],
		age:         age,
		aged:        aged,
	}, true
}

// handlerOf returns the nearest reverse_proxy handler among the modules
// that provisioned the policy (it may be a fallback of another policy),
// or nil outside one. Caddy provisions the handler's selection policy
// before its upstreams and health checks.
func handlerOf(ctx caddy.Context) *reverseproxy.Handler {
	mods := ctx.Modules()
	for i := len(mods) - 1; i >= 0; i-- {
		if h, ok := mods[i].(*reverseproxy.Handler); ok {
			return h
		}
	}
	return nil
}

// staticDialsOf returns the Dials of the static upstreams of h, the
// nearest reverse_proxy handler above the policy, or nil with dynamic
// upstreams or no handler.
func staticDialsOf(h *reverseproxy.Handler) []string {
	if h == nil || h.DynamicUpstreams != nil || h.DynamicUpstreamsRaw != nil {
		return nil
	}
	dials := make([]string, 0, len(h.Upstreams))
	for _, u := range h.Upstreams {
		dials = append(dials, u.Dial)
	}
	return dials
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
