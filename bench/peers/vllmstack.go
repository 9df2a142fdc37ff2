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
	caddy.RegisterModule(new(VLLMStackSelection))
}

// Defaults of the vLLM production-stack router's prefixaware routing
// logic (src/vllm_router/prefix/hashtrie.py, routers/routing_logic.py,
// parsers/parser.py).
const (
	// VLLMStackChunkSize is the HashTrie's chunk, in characters.
	VLLMStackChunkSize = 128

	// VLLMStackRequestStatsWindow is --request-stats-window: the sliding
	// window over which each engine's request rate (QPS) is computed.
	VLLMStackRequestStatsWindow = 60 * time.Second
)

// VLLMStackSelection is the vLLM production-stack router's prefixaware
// routing logic (github.com/vllm-project/production-stack
// src/vllm_router/routers/routing_logic.py PrefixAwareRouter and
// _qps_routing, src/vllm_router/prefix/hashtrie.py): a trie, per model and
// request path, of the hashes of the prompt's successive 128-character
// chunks, each node listing the endpoints sent a prompt through it; the
// request goes to the endpoint with the lowest request rate (over the
// 60s --request-stats-window; one never used first) among those holding
// the longest matched prefix, or among all endpoints when nothing matches
// (match threshold 0); the prompt is then inserted for it. The trie is
// never pruned.
//
// Deviations: bytes of routing text where the router slices characters
// of its own "<|role|>\ncontent" rendering; XXH3 instead of xxHash64; the
// prompt is inserted at selection (the router: after a successful
// response).
type VLLMStackSelection struct {
	// Characters of prompt per trie level. Default: `128`.
	ChunkSize int `json:"chunk_size,omitempty"`

	// Shortest match, in characters, that restricts the choice to the
	// matching endpoints. Default: `0`.
	MatchThreshold int `json:"match_threshold,omitempty"`

	// Window of the per-endpoint request rate. Default: `60s`.
	RequestStatsWindow caddy.Duration `json:"request_stats_window,omitempty"`

	// Wall seconds per simulated second, as prefixbench's -time-scale:
	// multiplies request_stats_window. Default: `1`.
	TimeScale float64 `json:"time_scale,omitempty"`

	mu    sync.Mutex
	tries map[string]*hashTrie // by model and path
	rates *rateWindow
	ids   interner
	intn  func(int) int
	now   func() time.Time
}

// CaddyModule returns the Caddy module information.
func (*VLLMStackSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.peer_vllmstack",
		New: func() caddy.Module { return new(VLLMStackSelection) },
	}
}

// Provision sets defaults.
func (s *VLLMStackSelection) Provision(caddy.Context) error {
	if s.ChunkSize == 0 {
		s.ChunkSize = VLLMStackChunkSize
	}
	if s.RequestStatsWindow == 0 {
		s.RequestStatsWindow = caddy.Duration(VLLMStackRequestStatsWindow)
	}
	if s.TimeScale == 0 {
		s.TimeScale = 1
	}
	if err := s.Validate(); err != nil {
		return err
	}
	s.tries = map[string]*hashTrie{}
	s.rates = newRateWindow(scaled(s.RequestStatsWindow, s.TimeScale))
	s.intn = defaultIntn
	s.now = time.Now
	return nil
}

// Validate checks the configuration.
func (s *VLLMStackSelection) Validate() error {
	switch {
	case s.ChunkSize < 1:
		return fmt.Errorf("chunk_size must be positive, got %d", s.ChunkSize)
	case s.MatchThreshold < 0:
		return fmt.Errorf("match_threshold must not be negative, got %d", s.MatchThreshold)
	case s.RequestStatsWindow <= 0:
		return fmt.Errorf("request_stats_window must be positive, got %v", time.Duration(s.RequestStatsWindow))
	case s.TimeScale <= 0:
		return fmt.Errorf("time_scale must be positive, got %v", s.TimeScale)
	}
	return nil
}

// Select routes to the least busy endpoint among the longest-prefix
// holders.
func (s *VLLMStackSelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, _ http.ResponseWriter) *reverseproxy.Upstream {
	req := routingText(r)
	if !req.ok {
		setReason(r, "fallback")
		return leastConn(pool, s.intn)
	}
	avail := available(pool)
	if len(avail) == 0 {
		return nil
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int, len(avail))
	for j, i := range avail {
		ids[j] = s.ids.id(pool[i].Dial)
	}
	key := req.model + "\n" + r.URL.Path
	trie := s.tries[key]
	if trie == nil {
		trie = newHashTrie(s.ChunkSize)
		s.tries[key] = trie
	}
	matched, holders := trie.longestPrefixMatch(req.text, ids)
	cands, reason := holders, "prefix"
	if matched == 0 || matched < s.MatchThreshold {
		cands, reason = ids, "qps"
	}
	chosen := cands[qpsRoute(cands, s.rates, now)]
	trie.insert(req.text, chosen)
	s.rates.add(chosen, now)
	setReason(r, reason)
	for j, id := range ids {
		if id == chosen {
			return pool[avail[j]]
		}
	}
	return nil // unreachable: chosen is one of ids
}

// Interface guards
var (
	_ caddy.Provisioner     = (*VLLMStackSelection)(nil)
	_ caddy.Validator       = (*VLLMStackSelection)(nil)
	_ reverseproxy.Selector = (*VLLMStackSelection)(nil)
)
