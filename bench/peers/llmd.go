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

// Defaults of llm-d's EPP (the Gateway API Inference Extension's endpoint
// picker, now github.com/llm-d/llm-d-inference-scheduler, module
// llm-d-router): the approximate prefix producer's defaultConfig
// (pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/
// types.go) and the default EndpointPickerConfig (pkg/epp/config/loader/
// defaults.go loadDefaultConfig).
const (
	// LLMDBlockSizeTokens is the block size in tokens when the engines do
	// not report theirs (vLLM's default); AutoTune reads theirs.
	LLMDBlockSizeTokens = 16

	// LLMDCharsPerToken is averageCharactersPerToken: a block of n tokens
	// is hashed as n x 4 characters of the prompt.
	LLMDCharsPerToken = 4

	// LLMDMaxPrefixBlocks is the most blocks matched; the prompt is cut to
	// 256 blocks before hashing.
	LLMDMaxPrefixBlocks = 256

	// LLMDLRUCapacityPerServer is the blocks remembered per server when
	// AutoTune has no engine figure: GIE sizes it for Llama-3-8B on an
	// H100 (64 GB of KV at 128 KiB per token is 500k tokens; the comment
	// then divides 250k by vLLM's 16-token blocks: 31,250).
	LLMDLRUCapacityPerServer = 31250

	// Weights of the default profile: queue-scorer 2,
	// kv-cache-utilization-scorer 2, prefix-cache-scorer 3, then the
	// max-score-picker.
	LLMDPrefixWeight  = 3
	LLMDQueueWeight   = 2
	LLMDKVCacheWeight = 2

	// LLMDRefreshInterval is the EPP's default metrics refresh interval
	// (--refresh-metrics-interval).
	LLMDRefreshInterval = 50 * time.Millisecond
)

// LLMDSelection is llm-d's default scheduling profile, read from
// github.com/llm-d/llm-d-inference-scheduler at
// 520af47896e5f06e43d09aca281a1149187b0ffd (the EPP left
// kubernetes-sigs/gateway-api-inference-extension for it; GIE removed its
// copy in a70292c1e00905bcd3412f498df0d5cca6679c33):
// pkg/epp/config/loader/defaults.go (the profile),
// pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/
// plugin.go, hashing.go, indexer.go, types.go (the prefix producer),
// scheduling/scorer/prefix/plugin.go, scorer/queuedepth/queue.go,
// scorer/kvcacheutilization/kvcache_utilization.go,
// picker/maxscore/picker.go, datalayer/extractor/metrics/extractor.go and
// factories.go (the vLLM metric mapping). The prefix producer hashes the
// prompt in blocks of block size x 4 characters (vLLM's 16 tokens: 64),
// at most 256 blocks, a trailing partial block included, chained from
// xxHash64 of the model name and cache salt, and scores each server by the
// share of the prompt's blocks in its LRU of block hashes; with AutoTune
// (the default) the block size is the first candidate engine's
// vllm:cache_config_info block_size and each server's LRU holds its own
// num_gpu_blocks, fixed when the LRU is made (31,250 for an engine that
// reports none); the queue scorer ranks servers by
// vllm:num_requests_waiting (min-max normalised), the KV scorer by 1 -
// vllm:kv_cache_usage_perc, all scraped from each engine's /metrics (the
// upstream's Dial) every 50ms by a goroutine that stops with the config;
// the total 3 x prefix + 2 x queue + 2 x KV picks the server, ties at
// random; the chosen server's LRU then learns every block.
//
// Deviations: the prompt is the routing text (GIE: the request's prompt
// or its messages marshalled to JSON); the hashes are recorded at
// selection (GIE: in PreRequest, asynchronously); an upstream not yet
// scraped is scraped once before its first decision (the EPP has scraped
// its pods before they get traffic); no cache salt (the benchmark sends
// none); one indexer per module.
type LLMDSelection struct {
	// Size the block and each server's LRU from the engines'
	// vllm:cache_config_info. Default: `true`.
	AutoTune *bool `json:"auto_tune,omitempty"`

	// Tokens per hashed block when AutoTune has no engine figure.
	// Default: `16`.
	BlockSizeTokens int `json:"block_size_tokens,omitempty"`

	// Most blocks hashed per request. Default: `256`.
	MaxPrefixBlocks int `json:"max_prefix_blocks,omitempty"`

	// Block hashes remembered per server when AutoTune has no engine
	// figure. Default: `31250`.
	LRUCapacityPerServer int `json:"lru_capacity_per_server,omitempty"`

	// Weights of the prefix, queue and KV-utilisation scorers, each
	// defaulted on its own (a profile that sets one keeps the others);
	// 0 drops that scorer, and at least one must be positive. Default:
	// `3`, `2`, `2`.
	PrefixWeight  *float64 `json:"prefix_weight,omitempty"`
	QueueWeight   *float64 `json:"queue_weight,omitempty"`
	KVCacheWeight *float64 `json:"kv_cache_weight,omitempty"`

	// How often every engine's /metrics is scraped. Default: `50ms`.
	RefreshInterval caddy.Duration `json:"refresh_interval,omitempty"`

	// Wall seconds per simulated second, as prefixbench's -time-scale:
	// multiplies refresh_interval (but not below 10ms). Default: `1`.
	TimeScale float64 `json:"time_scale,omitempty"`

	autoTune bool
	ctx      caddy.Context
	weights  llmdWeights
	scraper  *scraper
	mu       sync.Mutex
	index    *blockIndexer
	ids      interner
	intn     func(int) int
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
	s.autoTune = s.AutoTune == nil || *s.AutoTune
	if s.BlockSizeTokens == 0 {
		s.BlockSizeTokens = LLMDBlockSizeTokens
	}
	if s.MaxPrefixBlocks == 0 {
		s.MaxPrefixBlocks = LLMDMaxPrefixBlocks
	}
	if s.LRUCapacityPerServer == 0 {
		s.LRUCapacityPerServer = LLMDLRUCapacityPerServer
	}
	s.weights = llmdWeights{
		prefix: floatOr(s.PrefixWeight, LLMDPrefixWeight),
		queue:  floatOr(s.QueueWeight, LLMDQueueWeight),
		kv:     floatOr(s.KVCacheWeight, LLMDKVCacheWeight),
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
	s.index = newBlockIndexer(s.LRUCapacityPerServer)
	s.intn = defaultIntn
	s.scraper = newScraper(max(10*time.Millisecond, scaled(s.RefreshInterval, s.TimeScale)))
	s.ctx = ctx
	go s.scraper.run(ctx)
	return nil
}

// Validate checks the configuration.
func (s *LLMDSelection) Validate() error {
	switch {
	case s.BlockSizeTokens < 1:
		return fmt.Errorf("block_size_tokens must be positive, got %d", s.BlockSizeTokens)
	case s.MaxPrefixBlocks < 1:
		return fmt.Errorf("max_prefix_blocks must be positive, got %d", s.MaxPrefixBlocks)
	case s.LRUCapacityPerServer < 1:
		return fmt.Errorf("lru_capacity_per_server must be positive, got %d", s.LRUCapacityPerServer)
	case s.weights.prefix < 0 || s.weights.queue < 0 || s.weights.kv < 0:
		return fmt.Errorf("weights must not be negative, got prefix %v, queue %v, kv_cache %v", s.weights.prefix, s.weights.queue, s.weights.kv)
	case s.weights == llmdWeights{}:
		return fmt.Errorf("at least one of prefix_weight, queue_weight and kv_cache_weight must be positive")
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
	cands := make([]llmdCandidate, len(avail))
	metrics := make([]engineMetrics, len(avail))
	for j, i := range avail {
		metrics[j] = s.scraper.prime(s.ctx, pool[i].Dial)
		cands[j].waiting, cands[j].kvUsage = metrics[j].waiting, metrics[j].kvUsage
	}
	blockTokens := s.BlockSizeTokens
	if s.autoTune && metrics[0].blockSize > 0 {
		blockTokens = metrics[0].blockSize // GetBlockSize: the first endpoint's
	}
	hashes := gieHashPrompt(nil, req.model, "", req.text, blockTokens*LLMDCharsPerToken, s.MaxPrefixBlocks)
	s.mu.Lock()
	matches := s.index.matchLongestPrefix(hashes)
	ids := make([]int, len(avail))
	for j, i := range avail {
		ids[j] = s.ids.id(pool[i].Dial)
		cands[j].matched = matches[ids[j]]
	}
	j := maxScore(llmdScores(s.weights, len(hashes), cands), s.intn)
	gpuBlocks := 0
	if s.autoTune {
		gpuBlocks = metrics[j].numBlocks // makeserver: CacheNumBlocks if known
	}
	s.index.add(hashes, ids[j], gpuBlocks)
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
