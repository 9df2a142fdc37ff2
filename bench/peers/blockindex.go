package peers

import (
	"encoding/binary"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/zeebo/xxh3"
)

// hashBlocks appends the chained hashes of text's full blocks of
// blockSize bytes, at most maxBlocks of them, to dst: the chain is seeded
// with the hash of the model, h_i = hash(block_i, h_{i-1}), as GIE's
// hashPrompt does. A trailing partial block is not hashed. GIE uses
// xxHash64 of the block followed by the previous hash's 8 bytes; this uses
// XXH3 the same way.
func hashBlocks(dst []uint64, model string, text []byte, blockSize, maxBlocks int) []uint64 {
	prev := xxh3.HashString(model)
	buf := make([]byte, blockSize+8)
	for i := 0; i+blockSize <= len(text) && maxBlocks > 0; i, maxBlocks = i+blockSize, maxBlocks-1 {
		copy(buf, text[i:i+blockSize])
		binary.LittleEndian.PutUint64(buf[blockSize:], prev)
		prev = xxh3.Hash(buf)
		dst = append(dst, prev)
	}
	return dst
}

// blockIndexer is GIE's approximate prefix indexer (prefix/indexer.go):
// a per-server LRU of block hashes, with a reverse map from hash to the
// servers whose LRU holds it. Not safe for concurrent use.
type blockIndexer struct {
	capacity   int
	hashToPods map[uint64]map[int]struct{}
	podToLRU   map[int]*lru.Cache[uint64, struct{}]
}

func newBlockIndexer(capacity int) *blockIndexer {
	return &blockIndexer{
		capacity:   capacity,
		hashToPods: map[uint64]map[int]struct{}{},
		podToLRU:   map[int]*lru.Cache[uint64, struct{}]{},
	}
}

// add records that pod holds every hash, most recent last.
func (x *blockIndexer) add(hashes []uint64, pod int) {
	c := x.podToLRU[pod]
	if c == nil {
		// lru.NewWithEvict fails only for a non-positive size, which
		// Validate rules out.
		c, _ = lru.NewWithEvict(x.capacity, func(h uint64, _ struct{}) {
			if pods := x.hashToPods[h]; pods != nil {
				delete(pods, pod)
				if len(pods) == 0 {
					delete(x.hashToPods, h)
				}
			}
		})
		x.podToLRU[pod] = c
	}
	for _, h := range hashes {
		c.Add(h, struct{}{})
		pods := x.hashToPods[h]
		if pods == nil {
			pods = map[int]struct{}{}
			x.hashToPods[h] = pods
		}
		pods[pod] = struct{}{}
	}
}

// matchLongestPrefix returns, per pod, the number of hashes it holds
// among the leading run of hashes that some pod holds, GIE's greedy
// matchLongestPrefix: the walk stops at the first hash no pod holds.
func (x *blockIndexer) matchLongestPrefix(hashes []uint64) map[int]int {
	res := map[int]int{}
	for _, h := range hashes {
		pods := x.hashToPods[h]
		if len(pods) == 0 {
			break
		}
		for p := range pods {
			res[p]++
		}
	}
	return res
}

// llmdWeights are the scorers' weights.
type llmdWeights struct{ prefix, queue, kv float64 }

// llmdCandidate is one endpoint as the scorers see it.
type llmdCandidate struct {
	matched int     // blocks of the prompt the indexer believes it holds
	waiting int     // requests in its queue
	kvUsage float64 // KV cache utilisation, 0 to 1
}

// llmdScores returns each candidate's weighted score: prefix matched /
// total blocks (0 for a prompt shorter than a block), queue (max - own) /
// (max - min) over the candidates (1 when all are equal), KV 1 - usage.
func llmdScores(w llmdWeights, total int, cands []llmdCandidate) []float64 {
	minQ, maxQ := cands[0].waiting, cands[0].waiting
	for _, c := range cands[1:] {
		minQ, maxQ = min(minQ, c.waiting), max(maxQ, c.waiting)
	}
	scores := make([]float64, len(cands))
	for i, c := range cands {
		var prefix float64
		if total > 0 {
			prefix = float64(c.matched) / float64(total)
		}
		queue := 1.0
		if maxQ != minQ {
			queue = float64(maxQ-c.waiting) / float64(maxQ-minQ)
		}
		scores[i] = w.prefix*prefix + w.queue*queue + w.kv*(1-c.kvUsage)
	}
	return scores
}

// maxScore returns the index of the highest score, a random one of the
// highest (intn) as GIE's max-score-picker, which shuffles before sorting.
func maxScore(scores []float64, intn func(int) int) int {
	best, ties := 0, 1
	for i := 1; i < len(scores); i++ {
		switch {
		case scores[i] > scores[best]:
			best, ties = i, 1
		case scores[i] == scores[best]:
			ties++
			if intn(ties) == 0 {
				best = i
			}
		}
	}
	return best
}
