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
	// window over which each engine's request rate (QPS) is computed, for
	// the fallback below --prefix-min-match-length.
	VLLMStackRequestStatsWindow = 60 * time.Second
)

// VLLMStackSelection is the vLLM production-stack router's prefixaware
// routing logic, read from github.com/vllm-project/production-stack at
// a6c01db05f65f556235413ba8dbcfb0c01132fff (src/vllm_router/routers/
// routing_logic.py PrefixAwareRouter.route_request and _qps_routing,
// src/vllm_router/prefix/hashtrie.py, src/vllm_router/parsers/parser.py
// --prefix-min-match-length): the prompt is the chat messages' contents
// joined with "\n" (roles and tools left out) or the completion prompt; one
// trie for the router, of the xxHash64 of the prompt's successive
// 128-character chunks, each node listing the endpoints sent a prompt
// through it; the request goes to an endpoint chosen at random among
// those holding the longest matched prefix, which is every available
// endpoint when nothing matches; the prompt is then inserted for it. Only
// when the match is shorter than prefix_min_match_length (default 0, so
// never) does it fall back to the lowest request rate over the 60s
// --request-stats-window (an endpoint never used first). The trie is
// never pruned.
//
// Deviations: the prompt comes from the routing text, so text parts of one
// message are joined with "\n" (upstream: " "); endpoints are Dials.
type VLLMStackSelection struct {
	// Characters of prompt per trie level. Default: `128`.
	ChunkSize int `json:"chunk_size,omitempty"`

	// Shortest match, in characters, below which the request goes to the
	// endpoint of lowest request rate instead of a matching one.
	// Default: `0`.
	MatchThreshold int `json:"match_threshold,omitempty"`

	// Window of the per-endpoint request rate. Default: `60s`.
	RequestStatsWindow caddy.Duration `json:"request_stats_window,omitempty"`

	// Wall seconds per simulated second, as prefixbench's -time-scale:
	// multiplies request_stats_window. Default: `1`.
	TimeScale float64 `json:"time_scale,omitempty"`

	mu    sync.Mutex
	trie  *hashTrie
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
	s.trie = newHashTrie(s.ChunkSize)
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

// Select routes to a random endpoint among the longest-prefix holders.
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
	prompt := joinMessages(messages(req.text, req.kind), "\n", false)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int, len(avail))
	for j, i := range avail {
		ids[j] = s.ids.id(pool[i].Dial)
	}
	chosen, reason := vllmStackRoute(s.trie, s.rates, prompt, ids, s.MatchThreshold, now, s.intn)
	s.trie.insert(prompt, chosen)
	s.rates.add(chosen, now)
	setReason(r, reason)
	for j, id := range ids {
		if id == chosen {
			return pool[avail[j]]
		}
	}
	return nil // unreachable: chosen is one of ids
}

// vllmStackRoute is route_request's choice among available: below
// minMatch characters matched, _qps_routing over all of them ("qps");
// otherwise a uniformly random holder of the longest match, which is any
// of them when nothing matches ("prefix" or "random").
func vllmStackRoute(trie *hashTrie, rates *rateWindow, prompt []byte, available []int, minMatch int, now time.Time, intn func(int) int) (int, string) {
	matched, holders := trie.longestPrefixMatch(prompt, available)
	if matched < minMatch {
		return available[qpsRoute(available, rates, now)], "qps"
	}
	reason := "prefix"
	if matched == 0 {
		reason = "random"
	}
	return holders[intn(len(holders))], reason
}

// Interface guards
var (
	_ caddy.Provisioner     = (*VLLMStackSelection)(nil)
	_ caddy.Validator       = (*VLLMStackSelection)(nil)
	_ reverseproxy.Selector = (*VLLMStackSelection)(nil)
)
