package peers

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(new(DynamoSelection))
}

// Defaults of NVIDIA Dynamo's KV router with --no-kv-events
// (docs/router/kv_cache_routing.md, lib/llm/src/kv_router).
const (
	// DynamoBlockSize is the characters per KV block: vLLM's 16-token
	// blocks at 4 characters per token (Dynamo tokenizes; the peers do not).
	DynamoBlockSize = 64

	// DynamoOverlapScoreWeight is --kv-overlap-score-weight.
	DynamoOverlapScoreWeight = 1.0

	// DynamoTTL is how long the approximate indexer (ApproxKvIndexer)
	// believes a routed prompt's blocks stay cached on the worker.
	DynamoTTL = 120 * time.Second
)

// DynamoSelection is NVIDIA Dynamo's KV router without KV events
// (github.com/ai-dynamo/dynamo docs/router/kv_cache_routing.md;
// lib/llm/src/kv_router: scheduler.rs / selector.rs DefaultWorkerSelector,
// approx.rs ApproxKvIndexer, sequence.rs ActiveSequences): for each worker,
// cost = overlap_score_weight (1.0) x the prompt's blocks not covered by
// the blocks predicted to be cached there + the worker's active (decode)
// blocks with this request's added; the lowest cost wins (temperature 0,
// ties at random). The prediction is the approximate indexer's: every
// block of a prompt routed to a worker is assumed cached there for 120s.
// Active blocks are counted from routing until the response ends.
//
// Deviations: blocks are 64 characters of routing text, not 16 tokens;
// the prefill term is this request's only (Dynamo also adds the prefill
// tokens queued on the worker, released at the first token, which a
// Caddy selection policy cannot observe); active blocks do not grow with
// the output; the indexer expires blocks by time only (no size pruning).
type DynamoSelection struct {
	// Characters of prompt per KV block. Default: `64`.
	BlockSize int `json:"block_size,omitempty"`

	// Weight of the prefill blocks against the decode blocks; 0 ignores
	// the cache. Default: `1`.
	OverlapScoreWeight *float64 `json:"overlap_score_weight,omitempty"`

	// How long a routed prompt's blocks are believed cached. Default:
	// `120s`.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// Wall seconds per simulated second, as prefixbench's -time-scale:
	// multiplies ttl. Default: `1`.
	TimeScale float64 `json:"time_scale,omitempty"`

	weight float64
	mu     sync.Mutex
	index  *approxIndexer
	active *activeBlocks
	ids    interner
	intn   func(int) int
	now    func() time.Time

	released func() // called after a request's blocks are released; for tests
}

// CaddyModule returns the Caddy module information.
func (*DynamoSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.peer_dynamo",
		New: func() caddy.Module { return new(DynamoSelection) },
	}
}

// Provision sets defaults.
func (s *DynamoSelection) Provision(caddy.Context) error {
	if s.BlockSize == 0 {
		s.BlockSize = DynamoBlockSize
	}
	s.weight = DynamoOverlapScoreWeight
	if s.OverlapScoreWeight != nil {
		s.weight = *s.OverlapScoreWeight
	}
	if s.TTL == 0 {
		s.TTL = caddy.Duration(DynamoTTL)
	}
	if s.TimeScale == 0 {
		s.TimeScale = 1
	}
	if err := s.Validate(); err != nil {
		return err
	}
	s.index = newApproxIndexer(scaled(s.TTL, s.TimeScale))
	s.active = newActiveBlocks()
	s.intn = defaultIntn
	s.now = time.Now
	return nil
}

// Validate checks the configuration.
func (s *DynamoSelection) Validate() error {
	switch {
	case s.BlockSize < 1:
		return fmt.Errorf("block_size must be positive, got %d", s.BlockSize)
	case s.OverlapScoreWeight != nil && *s.OverlapScoreWeight < 0:
		return fmt.Errorf("overlap_score_weight must not be negative, got %v", *s.OverlapScoreWeight)
	case s.TTL <= 0:
		return fmt.Errorf("ttl must be positive, got %v", time.Duration(s.TTL))
	case s.TimeScale <= 0:
		return fmt.Errorf("time_scale must be positive, got %v", s.TimeScale)
	}
	return nil
}

// Select picks the available upstream of lowest cost and counts the
// request's blocks as active there until the request ends.
func (s *DynamoSelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, _ http.ResponseWriter) *reverseproxy.Upstream {
	req := routingText(r)
	if !req.ok {
		setReason(r, "fallback")
		return leastConn(pool, s.intn)
	}
	avail := available(pool)
	if len(avail) == 0 {
		return nil
	}
	hashes, full := dynamoBlocks(req.model, req.text, s.BlockSize)
	now := s.now()
	costs := make([]float64, len(avail))
	ids := make([]int, len(avail))
	overlaps := make([]int, len(avail))
	s.mu.Lock()
	for j, i := range avail {
		ids[j] = s.ids.id(pool[i].Dial)
		overlaps[j] = s.index.overlap(hashes[:full], ids[j], now)
		active, added := s.active.count(ids[j], hashes)
		costs[j] = dynamoCost(s.weight, len(req.text), s.BlockSize, overlaps[j], active, added)
	}
	j := argmin(costs, s.intn)
	worker := ids[j]
	s.index.record(hashes[:full], worker, now)
	s.active.add(worker, hashes)
	s.mu.Unlock()
	context.AfterFunc(r.Context(), func() {
		s.mu.Lock()
		s.active.remove(worker, hashes)
		s.mu.Unlock()
		if s.released != nil {
			s.released()
		}
	})
	if overlaps[j] > 0 {
		setReason(r, "overlap")
	} else {
		setReason(r, "cold")
	}
	return pool[avail[j]]
}

// Interface guards
var (
	_ caddy.Provisioner     = (*DynamoSelection)(nil)
	_ caddy.Validator       = (*DynamoSelection)(nil)
	_ reverseproxy.Selector = (*DynamoSelection)(nil)
)
