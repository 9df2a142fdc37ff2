package peers

import (
	"encoding/binary"
	"time"

	"github.com/zeebo/xxh3"
)

// dynamoHashSeed is the seed of Dynamo's block hashes (lib/kv-router
// protocols: XXH3 with seed 1337).
const dynamoHashSeed = 1337

// dynamoLocalHash is Dynamo's LocalBlockHash of one block of tokens: XXH3
// with seed 1337 of the tokens as little-endian u32s, what
// compute_block_hash_for_seq gives each full block.
func dynamoLocalHash(tokens []uint32) uint64 {
	buf := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], t)
	}
	return xxh3.HashSeed(buf, dynamoHashSeed)
}

// dynamoSeqHash chains a block's local hash to its parent's sequence
// hash (compute_seq_hash_for_block): the first block's sequence hash is
// its local hash, the next ones XXH3 seed 1337 of (parent, local) as
// little-endian u64s. A sequence hash names the whole prefix.
func dynamoSeqHash(parent uint64, first bool, local uint64) uint64 {
	if first {
		return local
	}
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], parent)
	binary.LittleEndian.PutUint64(buf[8:], local)
	return xxh3.HashSeed(buf[:], dynamoHashSeed)
}

// dynamoSeqHashes appends the sequence hashes of tokens' full blocks of
// blockSize tokens to dst; a trailing partial block has none, as only
// complete blocks are matched and tracked.
func dynamoSeqHashes(dst []uint64, tokens []uint32, blockSize int) []uint64 {
	var parent uint64
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		parent = dynamoSeqHash(parent, i == 0, dynamoLocalHash(tokens[i:i+blockSize]))
		dst = append(dst, parent)
	}
	return dst
}

// kvEventIndexer is Dynamo's KV indexer fed by the engines' events
// (lib/kv-router indexer RadixTree: apply_event, find_matches): per
// worker, the prefixes its engine holds, named by sequence hashes
// recomputed from each stored block's tokens, and the engine's own block
// hash of each, for removals. Applying a worker's events in order makes
// it hold exactly what the engine's cache holds. Not safe for concurrent
// use.
type kvEventIndexer struct {
	workers map[int]*workerBlocks
}

type workerBlocks struct {
	held     map[uint64]struct{} // sequence hashes
	byEngine map[uint64]uint64   // engine block hash -> sequence hash
}

func newKVEventIndexer() *kvEventIndexer {
	return &kvEventIndexer{workers: map[int]*workerBlocks{}}
}

func (x *kvEventIndexer) worker(w int) *workerBlocks {
	b := x.workers[w]
	if b == nil {
		b = &workerBlocks{held: map[uint64]struct{}{}, byEngine: map[uint64]uint64{}}
		x.workers[w] = b
	}
	return b
}

// stored applies a BlockStored event of worker w: blocks whose parent is
// parentHash (the engine's hash; none for a sequence's first block), with
// tokens blockSize per block. It reports false, changing nothing, if the
// parent is unknown, as Dynamo's tree rejects a block whose parent it
// does not hold.
func (x *kvEventIndexer) stored(w int, parentHash *uint64, engineHashes []uint64, tokens []uint32, blockSize int) bool {
	b := x.worker(w)
	var seq uint64
	first := parentHash == nil
	if !first {
		p, ok := b.byEngine[*parentHash]
		if !ok {
			return false
		}
		seq = p
	}
	for k, h := range engineHashes {
		if (k+1)*blockSize > len(tokens) {
			break
		}
		seq = dynamoSeqHash(seq, first && k == 0, dynamoLocalHash(tokens[k*blockSize:(k+1)*blockSize]))
		b.held[seq] = struct{}{}
		b.byEngine[h] = seq
	}
	return true
}

// removed applies a BlockRemoved event of worker w.
func (x *kvEventIndexer) removed(w int, engineHashes []uint64) {
	b := x.worker(w)
	for _, h := range engineHashes {
		if seq, ok := b.byEngine[h]; ok {
			delete(b.held, seq)
			delete(b.byEngine, h)
		}
	}
}

// cleared applies AllBlocksCleared of worker w.
func (x *kvEventIndexer) cleared(w int) {
	delete(x.workers, w)
}

// overlap returns how many leading blocks of seq worker w holds.
func (x *kvEventIndexer) overlap(seq []uint64, w int, _ time.Time) int {
	b := x.workers[w]
	if b == nil {
		return 0
	}
	for i, h := range seq {
		if _, ok := b.held[h]; !ok {
			return i
		}
	}
	return len(seq)
}

// approxIndexer is Dynamo's ApproxKvIndexer (--no-kv-events, lib/llm/src/
// kv_router/approx.rs; router_approximate_cache_policy ttl, the default):
// without events from the engines, it assumes that the blocks of a prompt
// routed to a worker stay cached there for ttl after the routing
// (refreshed by each routing), and matches new prompts against that
// belief. Not safe for concurrent use.
type approxIndexer struct {
	ttl       time.Duration
	expiry    map[int]map[uint64]time.Time // worker -> block -> expiry
	lastSweep time.Time
}

func newApproxIndexer(ttl time.Duration) *approxIndexer {
	return &approxIndexer{ttl: ttl, expiry: map[int]map[uint64]time.Time{}}
}

// overlap returns how many leading blocks of hashes worker holds at now.
func (x *approxIndexer) overlap(hashes []uint64, worker int, now time.Time) int {
	m := x.expiry[worker]
	for i, h := range hashes {
		if exp, ok := m[h]; !ok || !now.Before(exp) {
			return i
		}
	}
	return len(hashes)
}

// record notes that worker was sent a prompt of hashes at now, and drops
// expired entries every ttl/4 so memory follows the traffic of one ttl.
func (x *approxIndexer) record(hashes []uint64, worker int, now time.Time) {
	m := x.expiry[worker]
	if m == nil {
		m = map[uint64]time.Time{}
		x.expiry[worker] = m
	}
	for _, h := range hashes {
		m[h] = now.Add(x.ttl)
	}
	if now.Sub(x.lastSweep) >= x.ttl/4 {
		x.lastSweep = now
		for _, m := range x.expiry {
			for h, exp := range m {
				if !now.Before(exp) {
					delete(m, h)
				}
			}
		}
	}
}

// activeLoad is Dynamo's active sequence tracking (lib/kv-router
// sequences: ActiveSequences, WorkerLoadProjection): per worker, the
// distinct blocks of the requests in flight (a shared prefix counted
// once), the prefill tokens they still owe (each request's uncached
// prompt tokens, until its first output token), and their number. Not
// safe for concurrent use.
type activeLoad struct {
	workers map[int]*workerLoad
}

type workerLoad struct {
	blocks        map[uint64]int // sequence hash -> active requests using it
	prefillTokens int
	requests      int
}

func newActiveLoad() *activeLoad {
	return &activeLoad{workers: map[int]*workerLoad{}}
}

func (a *activeLoad) worker(w int) *workerLoad {
	l := a.workers[w]
	if l == nil {
		l = &workerLoad{blocks: map[uint64]int{}}
		a.workers[w] = l
	}
	return l
}

// projection is worker w's WorkerLoadProjection for a request of blocks
// seq: its active prefill tokens, its active blocks, the request's blocks
// beyond the longest prefix already active there (prefix membership, as
// potential_blocks counts it), and its active requests.
func (a *activeLoad) projection(w int, seq []uint64) (prefillTokens, activeBlocks, additional, requests int) {
	l := a.workers[w]
	if l == nil {
		return 0, 0, len(seq), 0
	}
	shared := 0
	for shared < len(seq) && l.blocks[seq[shared]] > 0 {
		shared++
	}
	return l.prefillTokens, len(l.blocks), len(seq) - shared, l.requests
}

// add counts a request of blocks seq owing prefillTokens on worker w.
func (a *activeLoad) add(w int, seq []uint64, prefillTokens int) {
	l := a.worker(w)
	for _, h := range seq {
		l.blocks[h]++
	}
	l.prefillTokens += prefillTokens
	l.requests++
}

// prefillDone releases a request's prefill tokens (its first token came).
func (a *activeLoad) prefillDone(w, prefillTokens int) {
	a.worker(w).prefillTokens -= prefillTokens
}

// remove releases a finished request's blocks.
func (a *activeLoad) remove(w int, seq []uint64) {
	l := a.worker(w)
	for _, h := range seq {
		if l.blocks[h]--; l.blocks[h] <= 0 {
			delete(l.blocks, h)
		}
	}
	l.requests--
}

// dynamoWeights are the cost function's knobs (KvRouterConfig).
type dynamoWeights struct {
	overlapCredit      float64 // overlap_score_credit, 1.0
	prefillLoadScale   float64 // prefill_load_scale, 1.0
	activeRequestBlock float64 // decode_active_request_weight, 0.0
}

// dynamoLogit is the default worker cost (lower is better), as
// DefaultWorkerScorer::worker_logit computes it for an aggregated worker
// with prefill tracking on and no host, disk or shared cache:
//
//	raw_prefill_blocks = (active prefill + uncached + cached tokens) / block size
//	adjusted           = max(0, raw_prefill_blocks - overlap_score_credit x overlap blocks)
//	cost               = prefill_load_scale x adjusted
//	                   + active blocks + the request's additional blocks
//	                   + decode_active_request_weight x active requests
//
// where cached = cachedTokens and uncached = isl - cached (not below 0).
func dynamoLogit(w dynamoWeights, blockSize, isl, cachedTokens, overlapBlocks, activePrefill, activeBlocks, additional, requests int) float64 {
	raw := float64(activePrefill+max(0, isl-cachedTokens)+cachedTokens) / float64(blockSize)
	adjusted := max(0, raw-w.overlapCredit*float64(overlapBlocks))
	return w.prefillLoadScale*adjusted + float64(activeBlocks+additional) + w.activeRequestBlock*float64(requests)
}

// argmin returns the index of the lowest cost, a uniformly random one of
// the lowest (intn, reservoir sampling), as Dynamo's picker does at
// temperature 0.
func argmin(costs []float64, intn func(int) int) int {
	best, ties := 0, 1
	for i := 1; i < len(costs); i++ {
		switch {
		case costs[i] < costs[best]:
			best, ties = i, 1
		case costs[i] == costs[best]:
			ties++
			if intn(ties) == 0 {
				best = i
			}
		}
	}
	return best
}
