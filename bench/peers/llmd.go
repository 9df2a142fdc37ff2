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
	caddy.RegisterModule(new(LLMDSelection))
}

// Defaults of the Gateway API Inference Extension's prefix-cache-scorer
// (pkg/epp/scheduling/framework/plugins/multi/prefix/plugin.go) and of
// llm-d's scheduling profile.
const (
	// LLMDBlockSize is the characters per hashed block: "vLLM default
	// token block size is 16, and a good guess of average characters per
	// token is 4".
	LLMDBlockSize = 64

	// LLMDMaxPrefixBlocks is the most blocks matched; text beyond 256 x 64
	// characters is ignored.
	LLMDMaxPrefixBlocks = 256

	// LLMDLRUCapacityPerServer is the blocks remembered per server: GIE
	// sizes it for Llama-3-8B on an H100 (64 GB of KV at 128 KiB per token
	// is 500k tokens; GIE's comment then divides 250k by vLLM's 16-token
	// blocks: 31,250). It does not know the engines' real capacity.
	LLMDLRUCapacityPerServer = 31250

	// Weights of llm-d's default profile: prefix-cache-scorer 3,
	// queue-scorer 2, kv-cache-utilization-scorer 2, max-score-picker.
	LLMDPrefixWeight  = 3
	LLMDQueueWeight   = 2
	LLMDKVCacheWeight = 2

	// LLMDRefreshInterval is GIE's default metrics refresh interval
	// (--refresh-metrics-interval).
	LLMDRefreshInterval = 50 * time.Millisecond
)

// LLMDSelection is llm-d's default scheduling profile over the Gateway API
// Inference Extension's scorers (github.com/kubernetes-sigs/
// gateway-api-inference-extension pkg/epp/scheduling/framework/plugins:
// multi/prefix/plugin.go and indexer.go, scorer/queue.go,
// scorer/kvcache_utilization.go, picker/max_score_picker.go; weights from
// llm-d's EndpointPickerConfig): the approximate prefix-cache scorer hashes
// the prompt in 64-character blocks (at most 256) chained from a seed of
// the model name, and scores each server by the share of the prompt's
// blocks in its LRU of 31,250 block hashes; the queue scorer ranks servers
// by vllm:num_requests_waiting (min-max normalised), the KV scorer by
// 1 - vllm:kv_cache_usage_perc, both scraped from each engine's /metrics
// (the upstream's Dial) every 50ms by a goroutine that stops with the
// config; the total 3 x prefix + 2 x queue + 2 x KV picks the server, ties
// at random; the chosen server's LRU then learns every block.
//
// Deviations: XXH3 instead of xxHash64; the prompt is the routing text
// (GIE: the request's prompt or its marshalled messages); the hashes are
// recorded at selection (GIE: in PreRequest, asynchronously); an engine not
// yet scraped counts as idle; one indexer per module.
type LLMDSelection struct {
	// Characters of prompt per hashed block. Default: `64`.
	BlockSize int `json:"block_size,omitempty"`

	// Most blocks hashed per request. Default: `256`.
	MaxPrefixBlocks int `json:"max_prefix_blocks,omitempty"`

	// Block hashes remembered per server. Default: `31250`.
	LRUCapacityPerServer int `json:"lru_capacity_per_server,omitempty"`

	// Weights of the prefix, queue and KV-utilisation scorers. Default:
	// `3`, `2`, `2`.
	PrefixWeight  float64 `json:"prefix_weight,omitempty"`
	QueueWeight   float64 `json:"queue_weight,omitempty"`
	KVCacheWeight float64 `json:"kv_cache_weight,omitempty"`

	// How often every engine's /metrics is scraped. Default: `50ms`.
	RefreshInterval caddy.Duration `json:"refresh_interval,omitempty"`

	// Wall seconds per simulated second, as prefixbench's -time-scale:
	// multiplies refresh_interval (but not below 10ms). Default: `1`.
	TimeScale float64 `json:"time_scale,omitempty"`

	weights llmdWeights
	scraper *scraper
	mu      sync.Mutex
	index   *blockIndexer
	ids     interner
	intn    func(int) int
}

// CaddyModule returns the Caddy module information.
func (*LLMDSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.peer_llmd",
		New: func() caddy.Module { return new(LLMDSelection) },
	}
}

// Provision sets defaults, builds the indexer and starts the metrics
// scraper, which stops with ctx.
func (s *LLMDSelection) Provision(ctx caddy.Context) error {
	if s.BlockSize == 0 {
		s.BlockSize = LLMDBlockSize
	}
	if s.MaxPrefixBlocks == 0 {
		s.MaxPrefixBlocks = LLMDMaxPrefixBlocks
	}
	if s.LRUCapacityPerServer == 0 {
		s.LRUCapacityPerServer = LLMDLRUCapacityPerServer
	}
	if s.PrefixWeight == 0 && s.QueueWeight == 0 && s.KVCacheWeight == 0 {
		s.PrefixWeight, s.QueueWeight, s.KVCacheWeight = LLMDPrefixWeight, LLMDQueueWeight, LLMDKVCacheWeight
	}
	if s.RefreshInterval == 0 {
		s.RefreshInterval = caddy.Duration(LLMDRefreshInterval)
	}
	if s.TimeScale == 0 {
		s.TimeScale = 1
	}
	if err := s.Validate(); err != nil {
		return err
	}
	s.weights = llmdWeights{s.PrefixWeight, s.QueueWeight, s.KVCacheWeight}
	s.index = newBlockIndexer(s.LRUCapacityPerServer)
	s.intn = defaultIntn
	s.scraper = newScraper(max(10*time.Millisecond, scaled(s.RefreshInterval, s.TimeScale)))
	go s.scraper.run(ctx)
	return nil
}

// Validate checks the configuration.
func (s *LLMDSelection) Validate() error {
	switch {
	case s.BlockSize < 1:
		return fmt.Errorf("block_size must be positive, got %d", s.BlockSize)
	case s.MaxPrefixBlocks < 1:
		return fmt.Errorf("max_prefix_blocks must be positive, got %d", s.MaxPrefixBlocks)
	case s.LRUCapacityPerServer < 1:
		return fmt.Errorf("lru_capacity_per_server must be positive, got %d", s.LRUCapacityPerServer)
	case s.PrefixWeight < 0 || s.QueueWeight < 0 || s.KVCacheWeight < 0:
		return fmt.Errorf("weights must not be negative, got %v, %v, %v", s.PrefixWeight, s.QueueWeight, s.KVCacheWeight)
	case s.RefreshInterval <= 0:
		return fmt.Errorf("refresh_interval must be positive, got %v", time.Duration(s.RefreshInterval))
	case s.TimeScale <= 0:
		return fmt.Errorf("time_scale must be positive, got %v", s.TimeScale)
	}
	return nil
}

// Select scores the available upstreams and picks the best.
func (s *LLMDSelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, _ http.ResponseWriter) *reverseproxy.Upstream {
	for _, u := range pool {
		s.scraper.watch(u.Dial)
	}
	req := routingText(r)
	if !req.ok {
		setReason(r, "fallback")
		return leastConn(pool, s.intn)
	}
	avail := available(pool)
	if len(avail) == 0 {
		return nil
	}
	hashes := hashBlocks(nil, req.model, req.text, s.BlockSize, s.MaxPrefixBlocks)
	cands := make([]llmdCandidate, len(avail))
	for j, i := range avail {
		m := s.scraper.get(pool[i].Dial)
		cands[j].waiting, cands[j].kvUsage = m.waiting, m.kvUsage
	}
	s.mu.Lock()
	matches := s.index.matchLongestPrefix(hashes)
	ids := make([]int, len(avail))
	for j, i := range avail {
		ids[j] = s.ids.id(pool[i].Dial)
		cands[j].matched = matches[ids[j]]
	}
	j := maxScore(llmdScores(s.weights, len(hashes), cands), s.intn)
	s.index.add(hashes, ids[j])
	s.mu.Unlock()
	if cands[j].matched > 0 {
		setReason(r, "prefix")
	} else {
		setReason(r, "load")
	}
	return pool[avail[j]]
}

// Interface guards
var (
	_ caddy.Provisioner     = (*LLMDSelection)(nil)
	_ caddy.Validator       = (*LLMDSelection)(nil)
	_ reverseproxy.Selector = (*LLMDSelection)(nil)
)
