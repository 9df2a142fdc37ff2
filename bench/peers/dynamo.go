package peers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
)

func init() {
	caddy.RegisterModule(new(DynamoSelection))
	caddy.RegisterModule(new(DynamoApproxSelection))
}

// Defaults of NVIDIA Dynamo's KV router (lib/kv-router/src/scheduling/
// config.rs, KvRouterConfig::default).
const (
	// DynamoBlockSize is the KV block size in tokens until the engines'
	// events give theirs: vLLM's default, which Dynamo's vLLM worker
	// registers as the model's kv_block_size.
	DynamoBlockSize = 16

	// DynamoOverlapScoreCredit is overlap_score_credit: the prefill
	// blocks a cached block saves.
	DynamoOverlapScoreCredit = 1.0

	// DynamoPrefillLoadScale is prefill_load_scale, the weight of the
	// prefill term against the decode blocks (the deprecated
	// --kv-overlap-score-weight sets it).
	DynamoPrefillLoadScale = 1.0

	// DynamoTTL is router_ttl_secs: how long the approximate indexer
	// (--no-kv-events) believes a routed prompt's blocks stay cached.
	DynamoTTL = 120 * time.Second
)

// DynamoSelection (peer_dynamo) is NVIDIA Dynamo's KV router as it runs by
// default (`python -m dynamo.frontend --router-mode kv` in front of vLLM
// workers publishing KV events), read from github.com/ai-dynamo/dynamo at
// 07a6c9ce3bb096cfaf353fe69ee578e105c6a512: lib/kv-router/src/scheduling/
// selector/default.rs (DefaultWorkerScorer::worker_logit, the picker),
// lib/kv-router/src/scheduling/config.rs (KvRouterConfig defaults:
// overlap_score_credit 1, prefill_load_scale 1,
// decode_active_request_weight 0, router_temperature 0, use_kv_events,
// router_track_active_blocks and router_track_prefill_tokens on),
// lib/kv-router/src/sequences (WorkerLoadProjection), the router docs'
// cost model, and the KV event path (lib/llm/src/kv_router/publisher.rs
// from vLLM's ZMQ publisher). The frontend tokenizes the request with the
// model's chat template and tokenizer (here the engine's own,
// engine.PromptTokens) and hashes its full blocks of 16 tokens; the
// indexer, fed every engine's KV events in order (GET /kv_events, see
// bench/engine), knows which of those blocks each engine holds; for each
// worker,
//
//	cost = prefill_load_scale x max(0, (active prefill tokens + prompt tokens)/16 - overlap_score_credit x cached blocks)
//	     + active blocks + the prompt's blocks not already active there
//
// where active prefill tokens are the uncached prompt tokens of the
// requests routed there whose first token has not come back, and active
// blocks the distinct blocks of the requests in flight there; the lowest
// cost wins, ties at random. The chosen worker is charged the request's
// uncached prompt tokens until its first response byte (the first token
// of a stream) and its blocks until it ends.
//
// Deviations: events travel over HTTP from each engine to this Caddy
// (Dynamo: ZMQ to its worker, then NATS to the router), applied as they
// arrive; the first response byte is observed through an httptrace hook
// this policy adds to the proxied request; the partial last block and
// cache salts are ignored; no per-request config overrides, no host,
// disk or shared cache tiers, no busy thresholds or queueing (off by
// default upstream). The approximate mode, without KV events, is
// DynamoApproxSelection.
type DynamoSelection struct {
	dynamoCore
}

// DynamoApproxSelection (peer_dynamo_approx) is Dynamo's KV router with
// --no-kv-events: the same tokenization and cost as DynamoSelection, but
// the cached blocks are predicted by the approximate indexer (lib/llm/src/
// kv_router/approx.rs ApproxKvIndexer, router_approximate_cache_policy
// ttl, router_ttl_secs 120): every block of a prompt routed to a worker is
// believed cached there for 120s after its latest routing. It reads no
// events. Deviation: no pruning at router_max_tree_size (2^20 blocks,
// more than the benchmark routes in a TTL).
type DynamoApproxSelection struct {
	dynamoCore
}

// dynamoCore is what both modes share.
type dynamoCore struct {
	// KV block size in tokens; the engines' events override it. Default:
	// `16`.
	BlockSize int `json:"block_size,omitempty"`

	// Prefill blocks a cached block saves (overlap_score_credit); 0
	// ignores the cache. Default: `1`.
	OverlapScoreCredit *float64 `json:"overlap_score_credit,omitempty"`

	// Weight of the prefill term against the decode blocks
	// (prefill_load_scale). Default: `1`.
	PrefillLoadScale *float64 `json:"prefill_load_scale,omitempty"`

	// The deprecated --kv-overlap-score-weight, mapped as upstream maps
	// it: it sets prefill_load_scale, and 0 also sets
	// overlap_score_credit to 0. Default: unset.
	OverlapScoreWeight *float64 `json:"overlap_score_weight,omitempty"`

	// Block-equivalent cost per active request
	// (decode_active_request_weight). Default: `0`.
	DecodeActiveRequestWeight float64 `json:"decode_active_request_weight,omitempty"`

	// How long a routed prompt's blocks are believed cached, without KV
	// events. Default: `120s`.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// Wall seconds per simulated second, as prefixbench's -time-scale:
	// multiplies ttl. Default: `1`.
	TimeScale float64 `json:"time_scale,omitempty"`

	useEvents bool
	weights   dynamoWeights
	ctx       context.Context
	client    *http.Client

	mu         sync.Mutex
	blockSize  int
	events     *kvEventIndexer
	approx     *approxIndexer
	active     *activeLoad
	subscribed map[string]bool
	nextSeq    map[int]uint64 // per worker, the batch expected next
	gaps       int            // batches missed
	rejected   int            // stored events whose parent was unknown
	ids        interner
	intn       func(int) int
	now        func() time.Time

	// Test hooks, called after a batch is applied and after a request's
	// blocks are released.
	applied  func(dial string, b kvBatch)
	released func()
}

// CaddyModule returns the Caddy module information.
func (*DynamoSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.peer_dynamo",
		New: func() caddy.Module { return new(DynamoSelection) },
	}
}

// CaddyModule returns the Caddy module information.
func (*DynamoApproxSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.peer_dynamo_approx",
		New: func() caddy.Module { return new(DynamoApproxSelection) },
	}
}

// Provision sets defaults; the KV event subscriptions start at each
// upstream's first request and stop with ctx.
func (s *DynamoSelection) Provision(ctx caddy.Context) error {
	s.useEvents = true
	return s.provision(ctx)
}

// Provision sets defaults.
func (s *DynamoApproxSelection) Provision(ctx caddy.Context) error {
	return s.provision(ctx)
}

func (s *dynamoCore) provision(ctx caddy.Context) error {
	if s.BlockSize == 0 {
		s.BlockSize = DynamoBlockSize
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
	s.weights = dynamoWeights{
		overlapCredit:      floatOr(s.OverlapScoreCredit, DynamoOverlapScoreCredit),
		prefillLoadScale:   floatOr(s.PrefillLoadScale, DynamoPrefillLoadScale),
		activeRequestBlock: s.DecodeActiveRequestWeight,
	}
	if w := s.OverlapScoreWeight; w != nil { // apply_deprecated_overlap_score_weight_override
		s.weights.prefillLoadScale = *w
		if *w == 0 {
			s.weights.overlapCredit = 0
		}
	}
	s.ctx = ctx
	s.client = &http.Client{} // a stream: no timeout
	s.blockSize = s.BlockSize
	if s.useEvents {
		s.events = newKVEventIndexer()
	} else {
		s.approx = newApproxIndexer(scaled(s.TTL, s.TimeScale))
	}
	s.active = newActiveLoad()
	s.subscribed = map[string]bool{}
	s.nextSeq = map[int]uint64{}
	s.intn = defaultIntn
	s.now = time.Now
	return nil
}

// Validate checks the configuration.
func (s *dynamoCore) Validate() error {
	for name, v := range map[string]*float64{"overlap_score_credit": s.OverlapScoreCredit, "prefill_load_scale": s.PrefillLoadScale, "overlap_score_weight": s.OverlapScoreWeight} {
		if v != nil && *v < 0 {
			return fmt.Errorf("%s must not be negative, got %v", name, *v)
		}
	}
	switch {
	case s.BlockSize < 1:
		return fmt.Errorf("block_size must be positive, got %d", s.BlockSize)
	case s.DecodeActiveRequestWeight < 0:
		return fmt.Errorf("decode_active_request_weight must not be negative, got %v", s.DecodeActiveRequestWeight)
	case s.TTL <= 0:
		return fmt.Errorf("ttl must be positive, got %v", time.Duration(s.TTL))
	case s.TimeScale <= 0:
		return fmt.Errorf("time_scale must be positive, got %v", s.TimeScale)
	}
	return nil
}

// Select picks the available upstream of lowest cost, charges it the
// request's prefill tokens until the first response byte and its blocks
// until the request ends.
func (s *dynamoCore) Select(pool reverseproxy.UpstreamPool, r *http.Request, _ http.ResponseWriter) *reverseproxy.Upstream {
	req := routingText(r)
	if !req.ok {
		setReason(r, "fallback")
		return leastConn(pool, s.intn)
	}
	tokens, err := engine.PromptTokens(r.URL.Path, req.body)
	if err != nil {
		setReason(r, "fallback")
		return leastConn(pool, s.intn)
	}
	avail := available(pool)
	if len(avail) == 0 {
		return nil
	}
	now := s.now()
	s.mu.Lock()
	if s.useEvents {
		for _, u := range pool {
			s.subscribeLocked(u.Dial)
		}
	}
	bs := s.blockSize
	seq := dynamoSeqHashes(nil, tokens, bs)
	isl := len(tokens)
	costs := make([]float64, len(avail))
	ids := make([]int, len(avail))
	overlaps := make([]int, len(avail))
	for j, i := range avail {
		ids[j] = s.ids.id(pool[i].Dial)
		if s.useEvents {
			overlaps[j] = s.events.overlap(seq, ids[j], now)
		} else {
			overlaps[j] = s.approx.overlap(seq, ids[j], now)
		}
		prefill, activeBlocks, additional, requests := s.active.projection(ids[j], seq)
		costs[j] = dynamoLogit(s.weights, bs, isl, overlaps[j]*bs, overlaps[j], prefill, activeBlocks, additional, requests)
	}
	j := argmin(costs, s.intn)
	worker := ids[j]
	prefillTokens := isl - overlaps[j]*bs
	if !s.useEvents {
		s.approx.record(seq, worker, now)
	}
	s.active.add(worker, seq, prefillTokens)
	s.mu.Unlock()

	var once sync.Once
	prefillDone := func() {
		once.Do(func() {
			s.mu.Lock()
			s.active.prefillDone(worker, prefillTokens)
			s.mu.Unlock()
		})
	}
	ctx := r.Context()
	// The proxied request carries r's context: its first response byte
	// marks the end of the prefill (the first token of a stream).
	*r = *r.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotFirstResponseByte: prefillDone}))
	context.AfterFunc(ctx, func() {
		prefillDone()
		s.mu.Lock()
		s.active.remove(worker, seq)
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

// subscribeLocked starts following dial's KV events the first time it is
// seen.
func (s *dynamoCore) subscribeLocked(dial string) {
	if s.subscribed[dial] {
		return
	}
	s.subscribed[dial] = true
	worker := s.ids.id(dial)
	go subscribeKVEvents(s.ctx, s.client, dial, func(b kvBatch) {
		s.mu.Lock()
		s.applyLocked(worker, b)
		s.mu.Unlock()
		if s.applied != nil {
			s.applied(dial, b)
		}
	})
}

// applyLocked applies one batch of worker's events in order.
func (s *dynamoCore) applyLocked(worker int, b kvBatch) {
	if b.Seq > s.nextSeq[worker] {
		s.gaps += int(b.Seq - s.nextSeq[worker])
	}
	s.nextSeq[worker] = b.Seq + 1
	for _, ev := range b.Events {
		switch ev.Type {
		case "BlockStored":
			if ev.BlockSize > 0 {
				s.blockSize = ev.BlockSize
			}
			if !s.events.stored(worker, ev.Parent, ev.BlockHashes, ev.TokenIDs, s.blockSize) {
				s.rejected++
			}
		case "BlockRemoved":
			s.events.removed(worker, ev.BlockHashes)
		case "AllBlocksCleared":
			s.events.cleared(worker)
		}
	}
}

// Interface guards
var (
	_ caddy.Provisioner     = (*DynamoSelection)(nil)
	_ caddy.Validator       = (*DynamoSelection)(nil)
	_ reverseproxy.Selector = (*DynamoSelection)(nil)
	_ caddy.Provisioner     = (*DynamoApproxSelection)(nil)
	_ caddy.Validator       = (*DynamoApproxSelection)(nil)
	_ reverseproxy.Selector = (*DynamoApproxSelection)(nil)
)
