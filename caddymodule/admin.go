package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/fleet"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI serves the prefix_cache policies' state on Caddy's admin
// listener (never on a site), under /prefix_cache/:
//
//	GET  /prefix_cache/stats                 every policy instance: its options, index and upstreams
//	POST /prefix_cache/dry_run[?instance=N]  the body of an LLM request in, the upstream each
//	                                         instance would choose and why out; nothing is recorded
//	POST /prefix_cache/flush[?instance=N]    forget what the index learned, e.g. after the
//	                                         engines were restarted and their caches are empty
//	POST /prefix_cache/forget?upstream=DIAL[&instance=N]
//	                                         forget what one upstream was believed to hold, e.g.
//	                                         after that engine restarted
//
// With sync and hash_key, flush and forget also go to every other edge of
// the tier, which applies them to each of its policies syncing on the
// same channel (synccommand.go); their answers say whether they were
// sent (sent_to_tier), and whether a target syncs without hash_key
// (unkeyed_sync), whose other edges a flush or forget does not reach.
//
// Each instance has a number no other instance of the process had before
// (stats lists them), so ?instance=N names the same policy while an old
// and a new config overlap during a reload.
//
// stats is read-only; dry_run reads a prompt and answers whether its prefix
// is cached, an exact prefix-membership oracle: keep the admin listener
// local (Caddy's default) or give remote operators only GET on stats with
// Caddy's remote admin access control.
type AdminAPI struct{}

// maxDryRunBody bounds the body a dry run reads; each instance then applies
// its own max_body, as it would on a site. A larger body is refused.
const maxDryRunBody = 64 << 20

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.prefix_cache",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Routes returns the admin routes.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/prefix_cache/stats", Handler: caddy.AdminHandlerFunc(a.stats)},
		{Pattern: "/prefix_cache/dry_run", Handler: caddy.AdminHandlerFunc(a.dryRun)},
		{Pattern: "/prefix_cache/flush", Handler: caddy.AdminHandlerFunc(a.flush)},
		{Pattern: "/prefix_cache/forget", Handler: caddy.AdminHandlerFunc(a.forget)},
	}
}

type instanceStats struct {
	Instance uint64 `json:"instance"`
	// Server is the name of the HTTP server the policy serves, and Route
	// the path of its reverse_proxy handler in that server's config, as
	// the admin API's /config/apps/http/servers/<server><route> reads it.
	Server        string  `json:"server,omitempty"`
	Route         string  `json:"route,omitempty"`
	Index         string  `json:"index"`
	ChunkSize     int     `json:"chunk_size"`
	MaxChunks     int     `json:"max_chunks"`
	MaxEntries    int     `json:"max_entries"`
	MaxBody       int64   `json:"max_body"`
	BodyBudget    int64   `json:"body_budget"`
	LoadFactor    float64 `json:"load_factor"`
	LoadAllowance int     `json:"load_allowance"`
	// LoadAllowanceBytes is load_allowance_bytes; 0 when the byte bound is off.
	LoadAllowanceBytes int64 `json:"load_allowance_bytes"`
	// ColdLoadFactor is cold_load_factor; 0 when the cold bound is off.
	ColdLoadFactor float64 `json:"cold_load_factor"`
	MinMatch       int     `json:"min_match"`
	MinMatchRatio  float64 `json:"min_match_ratio"`
	// PrefillRate is prefill_rate; 0 when the backlog is off.
	PrefillRate int64 `json:"prefill_rate"`
	// Tenant is the tenant placeholder as configured (never a value).
	Tenant           string  `json:"tenant"`
	TenantShare      float64 `json:"tenant_share"`
	AllowEmptyTenant bool    `json:"allow_empty_tenant"`
	ForgetAfter      string  `json:"forget_after"`
	Fallback         string  `json:"fallback"`
	// BodyKeptForRetries says whether bodies are held after they were
	// sent, because the handler retries with lb_retry_match.
	BodyKeptForRetries bool `json:"body_kept_for_retries"`
	// Sync is the transport's state and what this instance applied from
	// other edges; absent without sync.
	Sync *syncStats `json:"sync,omitempty"`
	// EngineMetrics is engine_metrics; absent without it.
	EngineMetrics *engineMetricsStats `json:"engine_metrics,omitempty"`
	Entries       int                 `json:"entries"`
	Bytes         int64               `json:"bytes"`
	Evictions     uint64              `json:"evictions"`
	Upstreams     []upstreamStats     `json:"upstreams"`
	// Indexed holds every upstream the index knows, with the entries it
	// owns; one that left every pool stays until forget_after.
	Indexed map[string]int `json:"indexed_upstreams"`
}

type syncStats struct {
	edgesync.Status
	SyncHashes       string `json:"sync_hashes"`
	SyncLoad         bool   `json:"sync_load"`
	SyncLoadInterval string `json:"sync_load_interval"`
	AppliedPlaced    uint64 `json:"applied_placed"`
	AppliedConfirmed uint64 `json:"applied_confirmed"`
	AppliedLoad      uint64 `json:"applied_load"`
	// TierEdges is how many other edges reported their load lately.
	TierEdges int               `json:"tier_edges"`
	Rejected  map[string]uint64 `json:"rejected"`
	LastLag   string            `json:"last_lag"`
	// CatchUpRequests counts the times this instance asked the other
	// edges for their recent placements (it started empty, or its
	// transport reconnected); CatchUpSent the placements it published
	// again when another edge asked.
	CatchUpRequests uint64 `json:"catch_up_requests"`
	CatchUpSent     uint64 `json:"catch_up_sent"`
	AppliedFlush    uint64 `json:"applied_flush"`
	AppliedForget   uint64 `json:"applied_forget"`
}

type upstreamStats struct {
	Dial      string `json:"dial"`
	Available bool   `json:"available"`
	InFlight  int    `json:"in_flight"`
	// InFlightBytes is the routing text of this process's requests in
	// flight at the upstream: the byte bound's load.
	InFlightBytes int64 `json:"in_flight_bytes"`
	// PrefillBacklog is the prefill the upstream is estimated to have
	// queued, in bytes of routing text, by which cold requests are
	// placed: with sync, of the whole tier's requests. 0 when
	// prefill_rate is off.
	PrefillBacklog int64 `json:"prefill_backlog_bytes"`
	// RemoteInFlight and RemoteInFlightBytes are the other edges' load
	// at the upstream, as they last reported it (with sync); the bound
	// counts them with this edge's.
	RemoteInFlight      int   `json:"remote_in_flight"`
	RemoteInFlightBytes int64 `json:"remote_in_flight_bytes"`
	// RemoteInFlightCounted is what of RemoteInFlight the bound counts
	// for the next request: at most fleet.RemoteRatio times this edge's
	// own in flight there plus one. Below RemoteInFlight in an honest
	// tier, the tier is larger or more skewed than the clamp allows for.
	RemoteInFlightCounted int `json:"remote_in_flight_counted"`
	Owned                 int `json:"owned_entries"`
	// Engine is the upstream's latest good scrape, with engine_metrics;
	// absent until one.
	Engine *engineStats `json:"engine,omitempty"`
	// Capacity is its engine's capacity, with engine_metrics' capacity
	// on.
	Capacity *capacityStats `json:"capacity,omitempty"`
	// Answers is what the upstream's answers said it had cached, with
	// prefix_cache_usage; absent until one.
	Answers *answerStats `json:"answers,omitempty"`
}

// answerStats is what an upstream's answers said about its cache, and
// what the index predicted for the same requests.
type answerStats struct {
	Answers      uint64 `json:"answers"`
	PromptTokens int64  `json:"prompt_tokens"`
	CachedTokens int64  `json:"cached_tokens"`
	// HitRate is cached / prompt tokens, as the engine counted them;
	// PredictedHitRate the share of the same requests' routing text the
	// index believed the upstream held.
	HitRate          float64           `json:"hit_rate"`
	PredictedHitRate float64           `json:"predicted_hit_rate"`
	Outcomes         map[string]uint64 `json:"outcomes"`
}

// engineStats is what an upstream's engine last said on its metrics
// endpoint. A count it does not publish is -1.
type engineStats struct {
	Engine   string  `json:"engine"`
	Running  float64 `json:"running"`
	Waiting  float64 `json:"waiting"`
	KVTokens float64 `json:"kv_tokens"`
	KVUsage  float64 `json:"kv_usage"`
	// Others is the requests the engine had beyond this process's at
	// the scrape; the bound counts them while Stale is false.
	Others int `json:"others_in_flight"`
	// PrefillRate is the engine's prefill speed measured from its
	// counters, in tokens per second; 0 until measured.
	PrefillRate float64 `json:"prefill_tokens_per_second"`
	Age         string  `json:"age"`
	Stale       bool    `json:"stale"`
}

// capacityStats is, with engine_metrics' capacity on, an engine's KV
// capacity as the index models it, in chunks of routing text.
type capacityStats struct {
	// Chunks is the capacity the index applies (0: none yet), the
	// smaller of Published, from the engine's metrics, and Learned, from
	// its answers (prefix_cache_usage); Sent is the chunks the index
	// believes were sent to it uncached so far.
	Chunks    int    `json:"chunks"`
	Sent      uint32 `json:"sent"`
	Published int    `json:"published"`
	Learned   int    `json:"learned"`
	// Misses and Hits count the answers taken as evidence of an
	// eviction, and of a prefix held near the learned capacity.
	Misses uint64 `json:"misses"`
	Hits   uint64 `json:"hits"`
}

// engineMetricsStats is engine_metrics as configured, its header fields
// by name only (they may hold credentials).
type engineMetricsStats struct {
	URI           string   `json:"uri"`
	Port          int      `json:"port,omitempty"`
	Interval      string   `json:"interval"`
	Timeout       string   `json:"timeout"`
	Header        []string `json:"header,omitempty"`
	Queue         bool     `json:"queue"`
	Capacity      bool     `json:"capacity"`
	Prefill       bool     `json:"prefill"`
	BytesPerToken float64  `json:"bytes_per_token"`
}

func (a *AdminAPI) stats(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return methodNotAllowed(r, http.MethodGet)
	}
	var out []instanceStats
	for _, s := range listInstances() {
		st := s.state.index.Stats()
		owned := s.state.index.Owned()
		is := instanceStats{
			Instance: s.id, Index: s.state.key,
			Server: s.serverName(), Route: s.routePath(),
			ChunkSize: s.ChunkSize, MaxChunks: s.MaxChunks, MaxEntries: s.MaxEntries,
			MaxBody: s.MaxBody, BodyBudget: s.BodyBudget,
			LoadFactor: s.LoadFactor, LoadAllowance: *s.LoadAllowance, MinMatch: s.MinMatch,
			LoadAllowanceBytes: *s.LoadAllowanceBytes, ColdLoadFactor: *s.ColdLoadFactor,
			MinMatchRatio: *s.MinMatchRatio, PrefillRate: *s.PrefillRate,
			Tenant: s.Tenant, TenantShare: *s.TenantShare, AllowEmptyTenant: s.AllowEmptyTenant,
			ForgetAfter: time.Duration(s.ForgetAfter).String(), Fallback: s.fallbackName,
			BodyKeptForRetries: s.reuse.retryAfterRead || !s.reuse.known,
			Entries:            st.Entries, Bytes: st.Bytes, Evictions: st.Evictions,
			Upstreams: []upstreamStats{}, Indexed: owned,
		}
		if m := s.EngineMetrics; m != nil {
			is.EngineMetrics = &engineMetricsStats{
				URI: m.URI, Port: m.Port, Interval: time.Duration(m.Interval).String(), Timeout: time.Duration(m.Timeout).String(),
				Queue: *m.Queue, Capacity: m.Capacity, Prefill: m.Prefill, BytesPerToken: m.BytesPerToken,
			}
			for k := range m.Header {
				is.EngineMetrics.Header = append(is.EngineMetrics.Header, k)
			}
			sort.Strings(is.EngineMetrics.Header)
		}
		if ss := s.sync; ss != nil {
			is.Sync = &syncStats{
				Status:           ss.transport.Status(),
				SyncHashes:       s.SyncHashes,
				SyncLoad:         *s.SyncLoad,
				SyncLoadInterval: time.Duration(s.SyncLoadInterval).String(),
				AppliedPlaced:    ss.applied[edgesync.Placed].Load(),
				AppliedConfirmed: ss.applied[edgesync.Confirmed].Load(),
				AppliedLoad:      ss.applied[edgesync.LoadKind].Load(),
				TierEdges:        s.state.fleet.Edges(),
				Rejected:         map[string]uint64{},
				LastLag:          time.Duration(ss.lag.Load()).String(),
				CatchUpRequests:  ss.catchUp.requested.Load(),
				CatchUpSent:      ss.catchUp.answered.Load(),
				AppliedFlush:     ss.applied[edgesync.FlushKind].Load(),
				AppliedForget:    ss.applied[edgesync.ForgetKind].Load(),
			}
			for r, name := range rejectionNames {
				is.Sync.Rejected[name] = ss.rejected[r].Load()
			}
		}
		if pool := s.currentPool(); pool != nil {
			tab := s.upstreams.peek(s.state.index, *pool)
			now := time.Now().UnixNano()
			for i, u := range *pool {
				us := upstreamStats{
					Dial: u.Dial, Available: u.Available(), InFlight: u.NumRequests(), Owned: owned[u.Dial],
				}
				fs := s.state.fleet.Read(tab.ids[i], u.Dial, now, &s.fleetOptions)
				us.InFlightBytes, us.PrefillBacklog = fs.Bytes, fs.Queued
				us.RemoteInFlight, us.RemoteInFlightBytes = s.state.fleet.Reported(tab.ids[i])
				if s.fleetOptions.Tier {
					tier := fleet.Options{Tier: true} // the reports alone, not the engine's count
					us.RemoteInFlightCounted = s.state.fleet.Counted(fleet.State{}, tab.ids[i], u.Dial, now, us.InFlight, 0, false, &tier).RemoteRequests
				}
				if c, ok := s.state.fleet.Answers(tab.ids[i]); ok && tab.ids[i] != 0 {
					us.Answers = &answerStats{
						Answers: c.Answers, PromptTokens: c.PromptTokens, CachedTokens: c.CachedTokens,
						HitRate:          ratio(c.CachedTokens, c.PromptTokens),
						PredictedHitRate: ratio(c.PredictedBytes, c.RoutedBytes),
						Outcomes:         map[string]uint64{},
					}
					for _, o := range fleet.Outcomes {
						us.Answers.Outcomes[o.String()] = c.Outcomes[o]
					}
				}
				if e, ok := s.state.fleet.Engine(tab.ids[i], u.Dial); ok && tab.ids[i] != 0 {
					age := time.Duration(now - e.At)
					us.Engine = &engineStats{
						Engine: e.Engine.String(), Running: e.Running, Waiting: e.Waiting,
						KVTokens: e.KVTokens, KVUsage: e.KVUsage, Others: e.Others, PrefillRate: e.Prefill.Rate(),
						Age: age.Round(time.Millisecond).String(), Stale: age > s.fleetOptions.EngineStale,
					}
				}
				if m := s.EngineMetrics; m != nil && m.Capacity && tab.ids[i] != 0 {
					cs := &capacityStats{}
					cs.Chunks, cs.Sent = s.state.index.Capacity(tab.ids[i])
					if c, ok := s.state.fleet.Capacity(tab.ids[i]); ok {
						cs.Published, cs.Learned, cs.Misses, cs.Hits = c.Published, c.Learned, c.Misses, c.Hits
					}
					us.Capacity = cs
				}
				is.Upstreams = append(is.Upstreams, us)
			}
		}
		sort.Slice(is.Upstreams, func(i, j int) bool { return is.Upstreams[i].Dial < is.Upstreams[j].Dial })
		out = append(out, is)
	}
	return writeJSON(w, map[string]any{"instances": out})
}

type dryRunResult struct {
	Instance     uint64 `json:"instance"`
	Routed       bool   `json:"routed"`
	Skip         string `json:"skip,omitempty"`
	Error        string `json:"error,omitempty"`
	Dialect      string `json:"dialect,omitempty"`
	Reason       string `json:"reason,omitempty"`
	Upstream     string `json:"upstream,omitempty"`
	Preferred    string `json:"preferred,omitempty"`
	Spilled      bool   `json:"spilled"`
	Bound        int    `json:"bound,omitempty"`
	ByteBound    int64  `json:"byte_bound,omitempty"`
	ColdBound    int    `json:"cold_bound,omitempty"`
	PromptBytes  int    `json:"prompt_bytes"`
	MatchedBytes int    `json:"matched_bytes"`
}

// dryRun routes the admin request's body as each instance would route it
// on a site, headers included (so tenant placeholders work), without
// recording anything.
func (a *AdminAPI) dryRun(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return methodNotAllowed(r, http.MethodPost)
	}
	targets, err := selectInstances(r)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxDryRunBody+1))
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("reading body: %w", err)}
	}
	if len(body) > maxDryRunBody {
		return caddy.APIError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: fmt.Errorf("a dry run reads at most %d bytes", maxDryRunBody)}
	}
	var out []dryRunResult
	for _, t := range targets {
		s := t.s
		// Each instance reads its own copy, with fresh request variables,
		// as a request on a site would be read.
		req := r.Clone(r.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), nil, nil)
		p, v := s.route(req)
		res := dryRunResult{Instance: t.n, Skip: p.skip.String()}
		if v != nil && v.skip != skipNone {
			res.Skip = v.skip.String()
		}
		if v == nil || v.skip != skipNone {
			out = append(out, res)
			continue
		}
		pool := s.currentPool()
		if pool == nil {
			res.Error = "this instance has not routed a request yet, so its dynamic upstreams are unknown"
			out = append(out, res)
			continue
		}
		chosen, d, _ := s.choose(*pool, v, false)
		if chosen == nil {
			res.Error = "no upstream is available and known to the index"
			out = append(out, res)
			continue
		}
		res.Routed = true
		res.Dialect, res.Reason, res.Upstream, res.Preferred = d.dialect, d.reason, d.chosen, d.preferred
		res.Spilled, res.Bound, res.PromptBytes, res.MatchedBytes = d.spilled, d.bound, d.promptBytes, d.matched
		res.ByteBound, res.ColdBound = d.byteBound, d.coldBound
		out = append(out, res)
	}
	return writeJSON(w, map[string]any{"results": out})
}

func (a *AdminAPI) flush(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return methodNotAllowed(r, http.MethodPost)
	}
	targets, err := selectInstances(r)
	if err != nil {
		return err
	}
	flushed := map[*sharedState]bool{}
	for _, t := range targets {
		if !flushed[t.s.state] {
			t.s.state.flush()
			flushed[t.s.state] = true
		}
	}
	out := map[string]any{"flushed_indexes": len(flushed)}
	out["sent_to_tier"], out["unkeyed_sync"] = publishCommand(edgesync.Command{Kind: edgesync.FlushKind}, targets)
	return writeJSON(w, out)
}

// forget forgets one upstream in the indexes of the named instances (all
// by default), as the janitor does after forget_after: its entries go,
// its ID is freed, and it is interned afresh when next routed to.
func (a *AdminAPI) forget(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return methodNotAllowed(r, http.MethodPost)
	}
	dial := r.URL.Query().Get("upstream")
	if dial == "" {
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("upstream is required, e.g. ?upstream=10.0.0.11:8000")}
	}
	targets, err := selectInstances(r)
	if err != nil {
		return err
	}
	done := map[*sharedState]bool{}
	entries := 0
	exists := false
	for _, t := range targets {
		if pool := t.s.currentPool(); pool != nil && slices.ContainsFunc(*pool, func(u *reverseproxy.Upstream) bool { return u.Dial == dial }) {
			exists = true
		}
		st := t.s.state
		if done[st] {
			continue
		}
		done[st] = true
		if n, known := st.forget(dial); known {
			exists = true
			entries += n
		}
	}
	if !exists {
		// A typo, or the wrong edge: saying 200 with nothing forgotten
		// would hide it.
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no instance routes to or remembers upstream %q", dial)}
	}
	for _, t := range targets {
		t.s.upstreams.invalidate()
	}
	if entries > 0 {
		caddy.Log().Named("prefix_cache").Info("forgot an upstream on request of the admin API",
			zap.String("upstream", dial), zap.Int("entries", entries))
	}
	out := map[string]any{"upstream": dial, "forgotten_entries": entries}
	out["sent_to_tier"], out["unkeyed_sync"] = publishCommand(edgesync.Command{Kind: edgesync.ForgetKind, Upstream: dial}, targets)
	return writeJSON(w, out)
}

type numbered struct {
	n uint64
	s *PrefixCacheSelection
}

// selectInstances returns the instance named by ?instance=N, or all of
// them, in order.
func selectInstances(r *http.Request) ([]numbered, error) {
	all := listInstances()
	if len(all) == 0 {
		return nil, caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no prefix_cache policy is configured")}
	}
	v := r.URL.Query().Get("instance")
	var out []numbered
	for _, s := range all {
		if v == "" || v == strconv.FormatUint(s.id, 10) {
			out = append(out, numbered{s.id, s})
		}
	}
	if len(out) == 0 {
		ids := make([]string, len(all))
		for i, s := range all {
			ids[i] = strconv.FormatUint(s.id, 10)
		}
		return nil, caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no instance %q; running instances: %s", v, strings.Join(ids, ", "))}
	}
	return out, nil
}

func listInstances() []*PrefixCacheSelection {
	var list []*PrefixCacheSelection
	eachInstance(func(s *PrefixCacheSelection) { list = append(list, s) })
	return list
}

func methodNotAllowed(r *http.Request, want string) error {
	return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed, use %s", r.Method, want)}
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ratio is a / b, 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Interface guards
var _ caddy.AdminRouter = (*AdminAPI)(nil)

// serverName is the name of the HTTP server s serves, or "".
func (s *PrefixCacheSelection) serverName() string {
	if s.server == nil {
		return ""
	}
	return s.server.Name()
}

// routePath is the config path of s's reverse_proxy handler within its
// server, /routes/<i>/handle/<j>, through subroutes (handle, route), or
// "" when it is not found or its config is not running yet: Caddy
// writes a config's routes while it provisions it, during a reload
// while the stats are read.
func (s *PrefixCacheSelection) routePath() string {
	if s.server == nil || s.handler == nil || !s.running() {
		return ""
	}
	return findHandler(s.server.Routes, s.handler, "")
}

func findHandler(routes caddyhttp.RouteList, h *reverseproxy.Handler, prefix string) string {
	for i, r := range routes {
		for j, mh := range r.Handlers {
			at := fmt.Sprintf("%s/routes/%d/handle/%d", prefix, i, j)
			switch x := mh.(type) {
			case *reverseproxy.Handler:
				if x == h {
					return at
				}
			case *caddyhttp.Subroute:
				if p := findHandler(x.Routes, h, at); p != "" {
					return p
				}
			}
		}
	}
	return ""
}
