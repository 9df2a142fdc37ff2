package engine

import "testing"

// fill allocates len(hashes) blocks, caches them as a sequence and returns
// their ids, pinned.
func fill(t *testing.T, p *blockPool, hashes []uint64) []int32 {
	t.Helper()
	ids, ok := p.allocate(nil, len(hashes))
	if !ok {
		t.Fatalf("allocate(%d) failed with %d free", len(hashes), p.numFree())
	}
	for i, id := range ids {
		p.cache(id, hashes[i])
	}
	return ids
}

func hits(p *blockPool, hashes []uint64) int { return len(p.lookup(nil, hashes)) }

func TestBlockPoolLRUTailFirst(t *testing.T) {
	p := newBlockPool(6)
	a, b := []uint64{10, 11, 12}, []uint64{20, 21, 22}
	p.release(fill(t, p, a))
	p.release(fill(t, p, b))
	// Free queue: A2 A1 A0 B2 B1 B0. Each allocation evicts the head.
	want := []struct{ a, b int }{{2, 3}, {1, 3}, {0, 3}, {0, 2}, {0, 1}, {0, 0}}
	for i, w := range want {
		if _, ok := p.allocate(nil, 1); !ok {
			t.Fatalf("allocation %d failed", i)
		}
		if ga, gb := hits(p, a), hits(p, b); ga != w.a || gb != w.b {
			t.Errorf("after %d evictions: A hits %d, B hits %d; want %d, %d", i+1, ga, gb, w.a, w.b)
		}
	}
}

func TestBlockPoolOnlyLeadingRunHits(t *testing.T) {
	p := newBlockPool(4)
	seq := []uint64{1, 2, 3, 4}
	ids := fill(t, p, seq)
	// Free block 1 alone first, then the rest: it is evicted first, leaving
	// blocks 0, 2 and 3 cached.
	p.release(ids[1:2])
	p.release([]int32{ids[0], ids[2], ids[3]})
	if _, ok := p.allocate(nil, 1); !ok {
		t.Fatal("allocate(1) failed")
	}
	if p.numCached() != 3 {
		t.Fatalf("numCached() = %d, want 3", p.numCached())
	}
	if got := hits(p, seq); got != 1 {
		t.Errorf("lookup with block 1 evicted = %d blocks, want 1 (blocks after the gap do not count)", got)
	}
}

func TestBlockPoolPinnedBlocksStay(t *testing.T) {
	p := newBlockPool(4)
	seq := []uint64{1, 2}
	ids := fill(t, p, seq)
	p.release(ids)
	held := p.lookup(nil, seq)
	for _, id := range held {
		p.touch(id) // a running request uses the prefix
	}
	if _, ok := p.allocate(nil, 3); ok {
		t.Fatal("allocate(3) with 2 blocks free succeeded")
	}
	if _, ok := p.allocate(nil, 2); !ok {
		t.Fatal("allocate(2) with 2 blocks free failed")
	}
	if got := hits(p, seq); got != 2 {
		t.Errorf("pinned prefix: %d blocks hit, want 2", got)
	}
	p.release(held)
	if p.numFree() != 2 {
		t.Errorf("numFree() = %d after release, want 2", p.numFree())
	}
}

func TestBlockPoolDuplicatePrefix(t *testing.T) {
	p := newBlockPool(4)
	first := fill(t, p, []uint64{7})
	second := fill(t, p, []uint64{7}) // computed concurrently, same prefix
	if p.numCached() != 1 || p.cached[7] != first[0] {
		t.Errorf("cached = %v, want only block %d", p.cached, first[0])
	}
	p.release(first)
	p.release(second)
	p.reset()
	if p.numCached() != 0 || p.numFree() != 4 {
		t.Errorf("after reset: %d cached, %d free; want 0, 4", p.numCached(), p.numFree())
	}
}
