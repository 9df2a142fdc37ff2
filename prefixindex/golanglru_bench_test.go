package prefixindex

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/zeebo/xxh3"
)

// The index's job, done by this package and by hashicorp/golang-lru/v2 used
// as its maintainers intend: a request's Depths over 8 candidates (owners
// read without refreshing recency), then Record of its hashes for the chosen
// upstream (owners updated, recency refreshed, least recently used evicted).
// Keys are the chunk hashes, values the same packed owner list (four 16-bit
// IDs in a uint64, most recent first), so only the structures differ.
//
// The golang-lru contenders:
//
//   - lru: lru.Cache[uint64, uint64], the package's thread-safe cache, one
//     lock per call. Depths Peeks hash by hash in chunk order and stops at
//     the first hash no candidate holds; Record Peeks then Adds, deepest
//     first.
//   - 2q: lru.TwoQueueCache, golang-lru's segmented cache (a recent and a
//     frequent list plus a ghost list of recently evicted keys), the
//     nearest to this package's probation and protected lists.
//   - simplelru/sharded: 16 simplelru.LRU, each under its own mutex, a
//     request taking each shard's lock once for all its hashes in that
//     shard: the lock discipline of this package, around golang-lru's
//     unlocked core, as golang-lru's own Cache wraps simplelru.
//
// Not measured: expirable.LRU (a TTL cache; nothing here expires by age:
// an engine evicts by its own LRU, whatever the time) and ARC (a separate
// module, github.com/hashicorp/golang-lru/arc/v2, with 2Q's lists and ghost
// lists and more bookkeeping per entry than 2Q).
type lruJob interface {
	depths(hs []Hash, ids []ID, depths []int)
	record(hs []Hash, owner ID)
}

type indexJob struct{ ix *Index }

func (j indexJob) depths(hs []Hash, ids []ID, d []int) { j.ix.Depths(Scope{}, hs, ids, d) }
func (j indexJob) record(hs []Hash, owner ID)          { j.ix.Record(Scope{}, hs, owner) }

// ownerDepths is Depths over owner lists read in chunk order: each id's
// depth is one past the deepest position it owns, as with chained hashes.
func ownerDepths(owners []uint64, ids []ID, d []int) {
	for k, o := range owners {
		for j, id := range ids {
			if id != 0 && holds(o, id) {
				d[j] = k + 1
			}
		}
	}
}

type lockedJob struct{ c *lru.Cache[uint64, uint64] }

func (j lockedJob) depths(hs []Hash, ids []ID, d []int) {
	d = d[:len(ids)]
	clear(d)
	for k, h := range hs {
		o, _ := j.c.Peek(uint64(h))
		alive := false
		for i, id := range ids {
			if id != 0 && holds(o, id) {
				d[i] = k + 1
				alive = true
			}
		}
		if !alive {
			return
		}
	}
}

func (j lockedJob) record(hs []Hash, owner ID) {
	for k := len(hs) - 1; k >= 0; k-- {
		h := uint64(hs[k])
		o, _ := j.c.Peek(h)
		j.c.Add(h, pushOwner(o, uint16(owner)))
	}
}

type twoQJob struct {
	c *lru.TwoQueueCache[uint64, uint64]
}

func (j twoQJob) depths(hs []Hash, ids []ID, d []int) {
	d = d[:len(ids)]
	clear(d)
	for k, h := range hs {
		o, _ := j.c.Peek(uint64(h))
		alive := false
		for i, id := range ids {
			if id != 0 && holds(o, id) {
				d[i] = k + 1
				alive = true
			}
		}
		if !alive {
			return
		}
	}
}

func (j twoQJob) record(hs []Hash, owner ID) {
	for k := len(hs) - 1; k >= 0; k-- {
		h := uint64(hs[k])
		o, _ := j.c.Peek(h)
		j.c.Add(h, pushOwner(o, uint16(owner)))
	}
}

const lruShards = 16

type shardedJob struct {
	shards [lruShards]struct {
		mu  sync.Mutex
		lru *simplelru.LRU[uint64, uint64]
		_   [40]byte // keep shards' locks on separate cache lines
	}
	pool sync.Pool // *shardedScratch
}

type shardedScratch struct {
	order  []int32 // positions of hs grouped by shard
	end    [lruShards]int32
	owners []uint64
}

func newShardedJob(size int) (*shardedJob, error) {
	j := &shardedJob{}
	for i := range j.shards {
		l, err := simplelru.NewLRU[uint64, uint64](size/lruShards, nil)
		if err != nil {
			return nil, err
		}
		j.shards[i].lru = l
	}
	j.pool.New = func() any { return new(shardedScratch) }
	return j, nil
}

// group sorts the positions of hs by shard (a counting sort).
func (j *shardedJob) group(sc *shardedScratch, hs []Hash) {
	var count [lruShards]int32
	for _, h := range hs {
		count[uint64(h)%lruShards]++
	}
	var sum int32
	for s, c := range count {
		sum += c
		sc.end[s] = sum
	}
	if cap(sc.order) < len(hs) {
		sc.order = make([]int32, len(hs))
	}
	sc.order = sc.order[:len(hs)]
	next := sc.end
	for k := len(hs) - 1; k >= 0; k-- {
		s := uint64(hs[k]) % lruShards
		next[s]--
		sc.order[next[s]] = int32(k)
	}
}

func (j *shardedJob) depths(hs []Hash, ids []ID, d []int) {
	d = d[:len(ids)]
	clear(d)
	sc := j.pool.Get().(*shardedScratch)
	defer j.pool.Put(sc)
	j.group(sc, hs)
	if cap(sc.owners) < len(hs) {
		sc.owners = make([]uint64, len(hs))
	}
	sc.owners = sc.owners[:len(hs)]
	start := int32(0)
	for s, end := range sc.end {
		if start == end {
			continue
		}
		sh := &j.shards[s]
		sh.mu.Lock()
		for _, k := range sc.order[start:end] {
			sc.owners[k], _ = sh.lru.Peek(uint64(hs[k]))
		}
		sh.mu.Unlock()
		start = end
	}
	ownerDepths(sc.owners, ids, d)
}

func (j *shardedJob) record(hs []Hash, owner ID) {
	sc := j.pool.Get().(*shardedScratch)
	defer j.pool.Put(sc)
	j.group(sc, hs)
	start := int32(0)
	for s, end := range sc.end {
		if start == end {
			continue
		}
		sh := &j.shards[s]
		sh.mu.Lock()
		// Deepest first, as Record does: order holds each shard's
		// positions in ascending order.
		for i := end - 1; i >= start; i-- {
			h := uint64(hs[sc.order[i]])
			o, _ := sh.lru.Peek(h)
			sh.lru.Add(h, pushOwner(o, uint16(owner)))
		}
		sh.mu.Unlock()
		start = end
	}
}

// fillJob records n unique hashes, 128 per request, round-robin over ids:
// the same keys fill uses.
func fillJob(j lruJob, n int, ids []ID) {
	var buf [128]Hash
	for i := 0; i < n; i += len(buf) {
		for k := range buf {
			buf[k] = Hash(xxh3.HashSeed(nil, uint64(i+k)))
		}
		j.record(buf[:min(len(buf), n-i)], ids[(i/len(buf))%len(ids)])
	}
}

// gcCPU is the CPU time the garbage collector has spent so far.
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64()
}

// BenchmarkVsGolangLRU does the index's job at its default size (1M
// entries, 8 upstreams, requests of 128 chunks, a full index so that every
// new hash evicts one) with this package and with golang-lru/v2, and
// reports, for each:
//
//   - gc: one runtime.GC() with the full index live (ns/op: its wall time;
//     gc-cpu-ns/op: the collector's CPU time, from runtime/metrics), with
//     B/entry (heap growth of the index filled with twice its bound of
//     unique hashes, after GC, per entry it can hold) and
//     objects/entry (heap objects per entry, what the collector walks);
//     the baseline row is the same GC with no index;
//   - lookup: Depths of a warm request (held whole by one candidate, half by
//     another);
//   - record/refresh: Record of that warm request, owners rotating;
//   - record/new: Record of a new request, every hash evicting one;
//   - parallel: one request's Depths then Record from each goroutine
//     (-cpu 2 for two), half of them warm, half new.
//
// Run (about three minutes on 2 cores):
//
//	go test -run '^$' -bench VsGolangLRU -benchmem -count 3 -cpu 2 ./prefixindex
func BenchmarkVsGolangLRU(b *testing.B) {
	const (
		n      = DefaultMaxEntries
		chunks = 128
	)
	b.Run("baseline/gc", func(b *testing.B) {
		benchGC(b, nil, 0, 0)
	})
	contenders := []struct {
		name string
		make func(b *testing.B) lruJob
	}{
		{"prefixindex", func(b *testing.B) lruJob { return indexJob{newIndex(b, Config{MaxEntries: n})} }},
		{"lru", func(b *testing.B) lruJob {
			c, err := lru.New[uint64, uint64](n)
			if err != nil {
				b.Fatal(err)
			}
			return lockedJob{c}
		}},
		{"2q", func(b *testing.B) lruJob {
			c, err := lru.New2Q[uint64, uint64](n)
			if err != nil {
				b.Fatal(err)
			}
			return twoQJob{c}
		}},
		{"simplelru-sharded", func(b *testing.B) lruJob {
			j, err := newShardedJob(n)
			if err != nil {
				b.Fatal(err)
			}
			return j
		}},
	}
	ids := make([]ID, 8)
	for i := range ids {
		ids[i] = ID(i + 1)
	}
	for _, c := range contenders {
		b.Run(c.name, func(b *testing.B) {
			var ms0, ms1 runtime.MemStats
			heapAlloc()
			runtime.ReadMemStats(&ms0)
			j := c.make(b)
			if ij, ok := j.(indexJob); ok {
				for i := range ids {
					if got := intern(b, ij.ix, fmt.Sprintf("10.0.0.%d:8000", i)); got != ids[i] {
						b.Fatalf("Intern = %d, want %d", got, ids[i])
					}
				}
			}
			// Twice the bound: full, evicting, 2q's ghost list full too.
			fillJob(j, 2*n, ids)
			heapAlloc()
			runtime.ReadMemStats(&ms1)
			bytesPer := float64(ms1.HeapAlloc-ms0.HeapAlloc) / n
			objectsPer := float64(ms1.HeapObjects-ms0.HeapObjects) / n

			b.Run("gc", func(b *testing.B) {
				benchGC(b, j, bytesPer, objectsPer)
			})
			warm := hashes("vs-warm", chunks)
			j.record(warm[:chunks/2], ids[5])
			j.record(warm, ids[3])
			depths := make([]int, len(ids))
			b.Run("lookup", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					j.depths(warm, ids, depths)
				}
				if depths[3] != chunks || depths[5] != chunks/2 {
					b.Fatalf("depths = %v, want %d at 3 and %d at 5", depths, chunks, chunks/2)
				}
			})
			b.Run("record/refresh", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					j.record(warm, ids[i%len(ids)])
					i++
				}
			})
			var seq atomic.Uint64
			seq.Store(1 << 30)
			b.Run("record/new", func(b *testing.B) {
				hs := make([]Hash, chunks)
				b.ReportAllocs()
				for b.Loop() {
					i := seq.Add(1)
					for k := range hs {
						hs[k] = Hash(xxh3.HashSeed(nil, i<<20+uint64(k)))
					}
					j.record(hs, ids[i%uint64(len(ids))])
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					depths := make([]int, len(ids))
					hs := make([]Hash, chunks)
					for pb.Next() {
						i := seq.Add(1)
						if i%2 == 0 {
							copy(hs, warm)
						} else {
							for k := range hs {
								hs[k] = Hash(xxh3.HashSeed(nil, i<<20+uint64(k)))
							}
						}
						j.depths(hs, ids, depths)
						j.record(hs, ids[i%uint64(len(ids))])
					}
				})
			})
			runtime.KeepAlive(j)
		})
	}
}

func benchGC(b *testing.B, j lruJob, bytesPer, objectsPer float64) {
	heapAlloc()
	cpu := gcCPU()
	for b.Loop() {
		runtime.GC()
	}
	b.ReportMetric((gcCPU()-cpu)*1e9/float64(b.N), "gc-cpu-ns/op")
	if j != nil {
		b.ReportMetric(bytesPer, "B/entry")
		b.ReportMetric(objectsPer, "objects/entry")
	}
	runtime.KeepAlive(j)
}
