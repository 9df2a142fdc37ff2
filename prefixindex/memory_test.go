package prefixindex

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/zeebo/xxh3"
)

// boundBytes is the memory bound stated in the package documentation.
func boundBytes(maxEntries, shards int, names ...string) int64 {
	b := int64(46*maxEntries + 8704*shards + 17<<10)
	for _, n := range names {
		b += int64(len(n)) + 64
	}
	return b
}

// fill records n unique hashes, 128 per request, round-robin over ids,
// without allocating per request.
func fill(ix *Index, n int, ids []ID) {
	var buf [128]Hash
	for i := 0; i < n; i += len(buf) {
		for k := range buf {
			buf[k] = Hash(xxh3.HashSeed(nil, uint64(i+k)))
		}
		ix.Record(Scope{}, buf[:min(len(buf), n-i)], ids[(i/len(buf))%len(ids)])
	}
}

func heapAlloc() uint64 {
	// Twice: sync.Pool keeps a victim cache across one GC.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryBound floods indexes with 10x their bound in unique chunks and
// checks entries, Stats().Bytes against the documented formula and the
// project's 64 bytes per entry, and Stats().Bytes against the heap.
func TestMemoryBound(t *testing.T) {
	tests := []struct {
		cfg         Config
		maxPerEntry float64 // when full
	}{
		{Config{MaxEntries: 1 << 16, Shards: 16}, 42.5}, // 4096 per shard: 8192 slots, 2 B of page rounding
		{Config{MaxEntries: 100_000, Shards: 8}, 46},    // 12500 per shard: 32768 slots, worst case
		{Config{MaxEntries: 3 << 15, Shards: 4}, 35.5},  // 24576 per shard: 32768 slots, best case
		{Config{MaxEntries: 1000, Shards: 1}, 64},       // small: the fixed 17 KiB weighs
	}
	if testing.Short() {
		tests = tests[3:]
	}
	names := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%+v", tt.cfg), func(t *testing.T) {
			before := heapAlloc()
			ix := newIndex(t, tt.cfg)
			ids := make([]ID, len(names))
			for i, n := range names {
				ids[i] = intern(t, ix, n)
			}
			fill(ix, 10*tt.cfg.MaxEntries, ids)
			heap := int64(heapAlloc() - before)
			st := ix.Stats()
			runtime.KeepAlive(ix)

			if st.Entries != tt.cfg.MaxEntries {
				t.Errorf("Stats().Entries = %d, want %d (full)", st.Entries, tt.cfg.MaxEntries)
			}
			if want := uint64(9 * tt.cfg.MaxEntries); st.Evictions != want {
				t.Errorf("Stats().Evictions = %d, want %d", st.Evictions, want)
			}
			if bound := boundBytes(tt.cfg.MaxEntries, tt.cfg.Shards, names...); st.Bytes > bound {
				t.Errorf("Stats().Bytes = %d, want <= %d (documented bound)", st.Bytes, bound)
			}
			if per := float64(st.Bytes) / float64(st.Entries); per > tt.maxPerEntry {
				t.Errorf("Stats().Bytes/Entries = %.1f, want <= %.1f", per, tt.maxPerEntry)
			}
			// The heap holds what Stats says, give or take the names map and
			// GC bookkeeping.
			if diff := heap - st.Bytes; diff < -st.Bytes/50-8<<10 || diff > st.Bytes/50+8<<10 {
				t.Errorf("heap grew by %d bytes, Stats().Bytes = %d: differ by more than 2%% + 8 KiB", heap, st.Bytes)
			}
			t.Logf("entries %d, Stats().Bytes %d (%.1f B/entry), heap %d", st.Entries, st.Bytes, float64(st.Bytes)/float64(st.Entries), heap)
			checkInvariants(t, ix)
		})
	}
}

// TestLazyAllocation checks that a large, unused index costs almost nothing.
func TestLazyAllocation(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 1 << 24})
	if b := ix.Stats().Bytes; b > 32<<10 {
		t.Errorf("New(MaxEntries 1<<24).Stats().Bytes = %d, want <= 32 KiB before any Record", b)
	}
	ix.Record(Scope{}, hashes("x", 10), intern(t, ix, "A"))
	if b := ix.Stats().Bytes; b > 64<<10 {
		t.Errorf("after one Record of 10 hashes: Stats().Bytes = %d, want <= 64 KiB", b)
	}
}

// With capacities, the stamps add 16 bytes per entry and the clocks 512
// KiB, as the package documentation says, and the heap holds what Stats
// says.
func TestMemoryBoundWithCapacities(t *testing.T) {
	cfg := Config{MaxEntries: 1 << 16, Shards: 16}
	names := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}
	before := heapAlloc()
	ix := newIndex(t, cfg)
	ids := make([]ID, len(names))
	for i, n := range names {
		ids[i] = intern(t, ix, n)
		ix.SetCapacity(ids[i], 1000)
	}
	fill(ix, 10*cfg.MaxEntries, ids)
	heap := int64(heapAlloc() - before)
	st := ix.Stats()
	runtime.KeepAlive(ix)
	// The stamps' array grows as the entries' does, rounded up to its
	// allocator's size class: an eighth more at most.
	bound := boundBytes(cfg.MaxEntries, cfg.Shards, names...) + 16*int64(cfg.MaxEntries)*9/8 + 512<<10
	if st.Bytes > bound {
		t.Errorf("Stats().Bytes = %d, want <= %d", st.Bytes, bound)
	}
	if diff := heap - st.Bytes; diff > 64<<10 || diff < -64<<10 {
		t.Errorf("heap grew by %d, Stats().Bytes = %d: more than 64 KiB apart", heap, st.Bytes)
	}
}
