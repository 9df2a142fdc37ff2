package peers

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
	lru "github.com/hashicorp/golang-lru/v2"
)

// gieHashPrompt appends the block hashes of input to dst as GIE's
// approximate prefix producer computes them (hashing.go hashPrompt): no
// hash if input is shorter than one block of blockChars bytes; input cut
// to maxBlocks blocks; the chain seeded with xxHash64 of the model name
// and the cache salt; block i hashed as xxHash64(block_i, LE64(h_{i-1}));
// a trailing partial block hashed the same way.
func gieHashPrompt(dst []uint64, model, salt string, input []byte, blockChars, maxBlocks int) []uint64 {
	if blockChars <= 0 || len(input) < blockChars {
		return dst
	}
	if len(input) > blockChars*maxBlocks {
		input = input[:maxBlocks*blockChars]
	}
	d := xxhash.New()
	d.WriteString(model)
	if salt != "" {
		d.WriteString(salt)
	}
	prev := d.Sum64()
	var le [8]byte
	hash := func(block []byte) uint64 {
		d.Reset()
		d.Write(block)
		binary.LittleEndian.PutUint64(le[:], prev)
		d.Write(le[:])
		return d.Sum64()
	}
	i := 0
	for ; i+blockChars <= len(input); i += blockChars {
		prev = hash(input[i : i+blockChars])
		dst = append(dst, prev)
	}
	if i < len(input) {
		dst = append(dst, hash(input[i:]))
	}
	return dst
}

// blockIndexer is GIE's approximate prefix indexer (approximateprefix/
// indexer.go): a per-server LRU of block hashes, with a reverse map from
// hash to the servers whose LRU holds it. Not safe for concurrent use.
type blockIndexer struct {
	defaultCapacity int
	hashToPods      map[uint64]map[int]struct{}
	podToLRU        map[int]*lru.Cache[uint64, struct{}]
	podCapacity     map[int]int
}

func newBlockIndexer(defaultCapacity int) *blockIndexer {
	return &blockIndexer{
		defaultCapacity: defaultCapacity,
		hashToPods:      map[uint64]map[int]struct{}{},
		podToLRU:        map[int]*lru.Cache[uint64, struct{}]{},
		podCapacity:     map[int]int{},
	}
}

// capacity returns the size of pod's LRU, 0 if it has none yet.
func (x *blockIndexer) capacity(pod int) int {
	return x.podCapacity[pod]
}

// add records that pod holds every hash, most recent last. A pod's LRU is
// sized when it is first added to: gpuBlocks if positive (AutoTune's
// CacheNumBlocks), else the default, and keeps that size, as Add does.
func (x *blockIndexer) add(hashes []uint64, pod, gpuBlocks int) {
	c := x.podToLRU[pod]
	if c == nil {
		size := gpuBlocks
		if size <= 0 {
			size = x.defaultCapacity
		}
		x.podCapacity[pod] = size
		// lru.NewWithEvict fails only for a non-positive size, which
		// Validate rules out.
		c, _ = lru.NewWithEvict(size, func(h uint64, _ struct{}) {
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
