package peers

import (
	"time"

	"github.com/zeebo/xxh3"
)

// dynamoBlocks returns the chained hashes of text's blocks of blockSize
// bytes, seeded by the model, as Dynamo's sequence hashes chain its block
// hashes: full blocks first (the only ones the indexer matches), then, if
// text ends in a partial block, one hash standing for it (it occupies a KV
// block while the request is active). full is the number of full blocks.
func dynamoBlocks(model string, text []byte, blockSize int) (hashes []uint64, full int) {
	hashes = hashBlocks(nil, model, text, blockSize, len(text)/blockSize)
	full = len(hashes)
	if len(text)%blockSize != 0 {
		prev := xxh3.HashString(model)
		if full > 0 {
			prev = hashes[full-1]
		}
		hashes = append(hashes, xxh3.HashSeed(text[full*blockSize:], prev))
	}
	return hashes, full
}

// approxIndexer is Dynamo's ApproxKvIndexer: without events from the
// engines, it assumes that the blocks of a prompt routed to a worker stay
// cached there for ttl after the routing, and matches new prompts against
// that belief. Not safe for concurrent use.
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

// activeBlocks is Dynamo's ActiveSequences: per worker, the distinct
// blocks of the requests in flight there (shared prefixes counted once).
// Not safe for concurrent use.
type activeBlocks struct {
	refs map[int]map[uint64]int // worker -> block -> active requests using it
}

func newActiveBlocks() *activeBlocks {
	return &activeBlocks{refs: map[int]map[uint64]int{}}
}

// count returns worker's distinct active blocks and how many of hashes
// are not among them.
func (a *activeBlocks) count(worker int, hashes []uint64) (active, added int) {
	m := a.refs[worker]
	for _, h := range hashes {
		if m[h] == 0 {
			added++
		}
	}
	return len(m), added
}

func (a *activeBlocks) add(worker int, hashes []uint64) {
	m := a.refs[worker]
	if m == nil {
		m = map[uint64]int{}
		a.refs[worker] = m
	}
	for _, h := range hashes {
		m[h]++
	}
}

func (a *activeBlocks) remove(worker int, hashes []uint64) {
	m := a.refs[worker]
	for _, h := range hashes {
		if m[h]--; m[h] <= 0 {
			delete(m, h)
		}
	}
}

// dynamoCost is the KV router's logit (lower is better):
// overlap_weight x potential prefill blocks + potential decode blocks,
// where the prefill blocks are the prompt's length less the overlap, in
// blocks, and the decode blocks are the worker's active blocks with this
// request's added.
func dynamoCost(weight float64, textLen, blockSize, overlap, active, added int) float64 {
	prefill := float64(max(0, textLen-overlap*blockSize)) / float64(blockSize)
	return weight*prefill + float64(active+added)
}

// argmin returns the index of the lowest cost, a random one of the lowest
// (intn), as Dynamo's selector does at temperature 0.
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
