package peers

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(new(SGLangSelection))
}

// Defaults of the SGLang model gateway's cache_aware policy, from its CLI
// (lightseekorg/smg model_gateway/src/main.rs CliArgs: --cache-threshold,
// --balance-abs-threshold, --balance-rel-threshold, --eviction-interval,
// --max-tree-size; the Python launcher's RouterArgs agrees). The KV-usage
// imbalance triggers (--balance-token-usage-threshold and
// --overload-token-usage-threshold) default to 1.0, which disables them.
const (
	// SGLangCacheThreshold: a prefix match of more than this share of the
	// request's text routes to the matching worker.
	SGLangCacheThreshold = 0.3

	// SGLangBalanceAbsThreshold and SGLangBalanceRelThreshold: the system
	// is imbalanced, and the request goes to the least-loaded worker, when
	// max load - min load > 64 and max load > 1.5 x min load.
	SGLangBalanceAbsThreshold = 64
	SGLangBalanceRelThreshold = 1.5

	// SGLangEvictionInterval is the period of the LRU eviction sweep.
	SGLangEvictionInterval = 120 * time.Second

	// SGLangMaxTreeSize is the most characters a worker's share of the
	// tree may hold after a sweep (2^26).
	SGLangMaxTreeSize = 1 << 26
)

// SGLangSelection is the SGLang model gateway's cache_aware policy for
// HTTP workers, read from github.com/lightseekorg/smg (where sgl-router
// moved) at 73da68ca9472bbc0ff5f63d31a8a21fbb8696359:
// model_gateway/src/policies/cache_aware.rs (select_worker,
// is_imbalanced, select_worker_with_text, select_worker_min_load),
// model_gateway/src/policies/mod.rs (CacheAwareConfig),
// model_gateway/src/main.rs (CLI defaults), crates/kv_index/src/
// string_tree.rs (the tree), crates/protocols/src/chat.rs
// (extract_text_for_routing). The request text is the messages' texts
// joined with spaces (no roles, no tools) or the prompt; an approximate
// radix tree of the texts sent to each worker gives the worker of the
// longest match (see radixTree for which one), and the request goes there
// if the match covers more than cache_threshold (0.3) of its text, else
// to the least-loaded worker (fewest in flight, then fewest requests sent
// by this policy, then pool order), unless the in-flight loads are
// imbalanced (max - min > balance_abs_threshold 64 and max >
// balance_rel_threshold 1.5 x min), when it goes to the least-loaded
// worker; the text is then inserted for the chosen worker. A sweep every
// eviction_interval (120s) evicts each worker's least recently used
// leaves down to max_tree_size (2^26) characters. HTTP workers have
// neither the event-driven nor the token-tree mode, which need gRPC.
//
// Deviations: one lock around the tree instead of node locks; bytes where
// SMG counts chars (the same for ASCII); of a node's tenants when its
// creator left, the lowest id stands for DashMap's first; loads are
// Caddy's in-flight counts of this Caddy (SMG: its own, the same thing);
// one tree per module rather than per model (the benchmark serves one
// model).
type SGLangSelection struct {
	// Share of the request's text a worker must hold to be chosen for it;
	// 0 always takes the deepest match. Default: `0.3`.
	CacheThreshold *float64 `json:"cache_threshold,omitempty"`

	// In-flight difference above which (with the relative threshold) load
	// is imbalanced. Default: `64`.
	BalanceAbsThreshold int `json:"balance_abs_threshold,omitempty"`

	// Ratio of the largest to the smallest in-flight load above which
	// (with the absolute threshold) load is imbalanced. Default: `1.5`.
	BalanceRelThreshold float64 `json:"balance_rel_threshold,omitempty"`

	// Period of the tree's LRU eviction sweep. Default: `120s`.
	EvictionInterval caddy.Duration `json:"eviction_interval,omitempty"`

	// Most characters a worker's share of the tree keeps after a sweep.
	// Default: `67108864`.
	MaxTreeSize int `json:"max_tree_size,omitempty"`

	// Wall seconds per simulated second, as prefixbench's -time-scale:
	// multiplies eviction_interval. Default: `1`.
	TimeScale float64 `json:"time_scale,omitempty"`

	policy    sglangPolicy
	mu        sync.Mutex
	tree      *radixTree
	processed map[int]int // requests this policy sent each worker
	ids       interner
	intn      func(int) int
}

// CaddyModule returns the Caddy module information.
func (*SGLangSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.peer_sglang",
		New: func() caddy.Module { return new(SGLangSelection) },
	}
}

// Provision sets defaults, builds the tree and starts the eviction sweep,
// which stops with ctx.
func (s *SGLangSelection) Provision(ctx caddy.Context) error {
	if s.BalanceAbsThreshold == 0 {
		s.BalanceAbsThreshold = SGLangBalanceAbsThreshold
	}
	if s.BalanceRelThreshold == 0 {
		s.BalanceRelThreshold = SGLangBalanceRelThreshold
	}
	if s.EvictionInterval == 0 {
		s.EvictionInterval = caddy.Duration(SGLangEvictionInterval)
	}
	if s.MaxTreeSize == 0 {
		s.MaxTreeSize = SGLangMaxTreeSize
	}
	if s.TimeScale == 0 {
		s.TimeScale = 1
	}
	if err := s.Validate(); err != nil {
		return err
	}
	s.policy = sglangPolicy{floatOr(s.CacheThreshold, SGLangCacheThreshold), s.BalanceAbsThreshold, s.BalanceRelThreshold}
	s.tree = newRadixTree()
	s.processed = map[int]int{}
	s.intn = defaultIntn
	go s.sweep(ctx, scaled(s.EvictionInterval, s.TimeScale))
	return nil
}

// Validate checks the configuration.
func (s *SGLangSelection) Validate() error {
	switch {
	case s.CacheThreshold != nil && (*s.CacheThreshold < 0 || *s.CacheThreshold > 1):
		return fmt.Errorf("cache_threshold must be in [0, 1], got %v", *s.CacheThreshold)
	case s.BalanceAbsThreshold < 0:
		return fmt.Errorf("balance_abs_threshold must not be negative, got %d", s.BalanceAbsThreshold)
	case s.BalanceRelThreshold < 1:
		return fmt.Errorf("balance_rel_threshold must be at least 1, got %v", s.BalanceRelThreshold)
	case s.EvictionInterval <= 0:
		return fmt.Errorf("eviction_interval must be positive, got %v", time.Duration(s.EvictionInterval))
	case s.MaxTreeSize < 1:
		return fmt.Errorf("max_tree_size must be positive, got %d", s.MaxTreeSize)
	case s.TimeScale <= 0:
		return fmt.Errorf("time_scale must be positive, got %v", s.TimeScale)
	}
	return nil
}

// sweep evicts the tree down to max_tree_size every interval until ctx is
// done.
func (s *SGLangSelection) sweep(ctx caddy.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			s.mu.Lock()
			s.tree.evict(s.MaxTreeSize)
			s.mu.Unlock()
		}
	}
}

// Select chooses an upstream as cache_aware does.
func (s *SGLangSelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, _ http.ResponseWriter) *reverseproxy.Upstream {
	req := routingText(r)
	if !req.ok {
		setReason(r, "fallback")
		return leastConn(pool, s.intn)
	}
	avail := available(pool)
	if len(avail) == 0 {
		return nil
	}
	text := joinMessages(messages(req.text, req.kind), " ", true)
	loads := make([]int, len(avail))
	tenants := make([]int, len(avail))
	processed := make([]int, len(avail))
	s.mu.Lock()
	for j, i := range avail {
		loads[j] = pool[i].NumRequests()
		tenants[j] = s.ids.id(pool[i].Dial)
		processed[j] = s.processed[tenants[j]]
	}
	j, reason := s.policy.choose(s.tree, text, tenants, loads, processed)
	if reason != "stale" {
		s.processed[tenants[j]]++
	}
	s.mu.Unlock()
	setReason(r, reason)
	return pool[avail[j]]
}

// Interface guards
var (
	_ caddy.Provisioner     = (*SGLangSelection)(nil)
	_ caddy.Validator       = (*SGLangSelection)(nil)
	_ reverseproxy.Selector = (*SGLangSelection)(nil)
)
