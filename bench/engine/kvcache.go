package engine

// blockPool is the KV cache: a fixed number of blocks, a map from chained
// block hash to the block holding that prefix, and vLLM V1's free block
// queue (vllm/v1/core/block_pool.py, kv_cache_utils.FreeKVCacheBlockQueue).
//
//   - A block is pinned while its reference count (running requests using
//     it) is positive, and is then absent from the free queue.
//   - An unpinned block sits in the free queue and keeps its hash: it is
//     still a cache hit until it is reused.
//   - Allocation takes blocks from the head of the free queue, evicting the
//     hash they held (least recently freed first).
//   - A finished or preempted request frees its blocks in reverse order, so
//     its tail blocks come before its head blocks in the queue and are
//     evicted first; a shared prefix outlives the suffixes that extend it.
//
// Memory: 24 bytes per block plus a map entry per cached block.
type blockPool struct {
	blocks     []block
	head, tail int32 // free queue ends, -1 when empty
	free       int   // blocks in the free queue
	cached     map[uint64]int32

	// trackRemoved, if set, makes the pool append the hash of every
	// cached prefix it evicts to removed, in eviction order, for the KV
	// event log (see kvevents.go).
	trackRemoved bool
	removed      []uint64
}

type block struct {
	hash       uint64 // chained hash of the prefix held, if cached
	prev, next int32  // free queue links, -1 at the ends
	ref        int32  // running requests using the block
	cached     bool   // hash is registered in blockPool.cached
}

const noBlock = -1

func newBlockPool(n int) *blockPool {
	p := &blockPool{
		blocks: make([]block, n),
		head:   noBlock,
		tail:   noBlock,
		cached: make(map[uint64]int32),
	}
	for i := range p.blocks {
		p.push(int32(i))
	}
	return p
}

// numFree is the number of unpinned blocks (free or evictable).
func (p *blockPool) numFree() int { return p.free }

// numCached is the number of blocks holding a cached prefix.
func (p *blockPool) numCached() int { return len(p.cached) }

// lookup appends to dst the blocks holding the longest run of leading
// hashes, stopping at the first miss: a block after a gap cannot be used.
func (p *blockPool) lookup(dst []int32, hashes []uint64) []int32 {
	for _, h := range hashes {
		id, ok := p.cached[h]
		if !ok {
			break
		}
		dst = append(dst, id)
	}
	return dst
}

// touch pins a cached block for one more request.
func (p *blockPool) touch(id int32) {
	b := &p.blocks[id]
	if b.ref == 0 {
		p.unlink(id)
	}
	b.ref++
}

// allocate appends n blocks, pinned, to dst, evicting the prefixes they
// held. It reports false and changes nothing if fewer than n are free.
func (p *blockPool) allocate(dst []int32, n int) ([]int32, bool) {
	if n > p.free {
		return dst, false
	}
	for range n {
		id := p.head
		p.unlink(id)
		b := &p.blocks[id]
		if b.cached {
			p.evict(b)
		}
		b.ref = 1
		dst = append(dst, id)
	}
	return dst, true
}

// release unpins the blocks of a sequence, last block first, so that the
// sequence's tail is evicted before its head.
func (p *blockPool) release(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		b := &p.blocks[ids[i]]
		b.ref--
		if b.ref == 0 {
			p.push(ids[i])
		}
	}
}

// cache registers block id as holding the prefix named by hash and reports
// whether it did. If another block already holds that prefix, id stays
// uncached.
func (p *blockPool) cache(id int32, hash uint64) bool {
	b := &p.blocks[id]
	if b.cached {
		return false
	}
	if _, ok := p.cached[hash]; ok {
		return false
	}
	b.hash, b.cached = hash, true
	p.cached[hash] = id
	return true
}

// evict forgets the prefix cached block b holds.
func (p *blockPool) evict(b *block) {
	delete(p.cached, b.hash)
	b.cached = false
	if p.trackRemoved {
		p.removed = append(p.removed, b.hash)
	}
}

// reset evicts every unpinned cached block.
func (p *blockPool) reset() {
	for id := p.head; id != noBlock; id = p.blocks[id].next {
		if b := &p.blocks[id]; b.cached {
			p.evict(b)
		}
	}
}

// push appends id to the tail of the free queue.
func (p *blockPool) push(id int32) {
	b := &p.blocks[id]
	b.prev, b.next = p.tail, noBlock
	if p.tail == noBlock {
		p.head = id
	} else {
		p.blocks[p.tail].next = id
	}
	p.tail = id
	p.free++
}

// unlink removes id from the free queue.
func (p *blockPool) unlink(id int32) {
	b := &p.blocks[id]
	if b.prev == noBlock {
		p.head = b.next
	} else {
		p.blocks[b.prev].next = b.next
	}
	if b.next == noBlock {
		p.tail = b.prev
	} else {
		p.blocks[b.next].prev = b.prev
	}
	b.prev, b.next = noBlock, noBlock
	p.free--
}
