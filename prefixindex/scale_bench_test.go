package prefixindex

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/internal/cputime"
)

// Scaling benchmarks: how a request's index work (Depths over the
// candidates, then Record) grows with the entries the index holds and
// with the number of candidates. The index is filled to capacity with
// other prompts, so lookups miss the CPU caches (and, at 10M entries, the
// TLB) as in production. A request is 64 chunks: 16 KiB of routing text
// at the default chunk size.
//
// The 10M-entry index takes several seconds and ~400 MB to fill; it is
// built only when PREFIXCACHE_BENCH_SCALE is set and -short is not:
//
//	PREFIXCACHE_BENCH_SCALE=1 go test -run '^$' -bench 'Entries' -benchtime 20000x ./prefixindex

// scaleSizes returns the capacities of the entries-scaling benchmarks.
func scaleSizes() []int {
	sizes := []int{1 << 16, 1 << 20}
	if os.Getenv("PREFIXCACHE_BENCH_SCALE") != "" && !testing.Short() {
		sizes = append(sizes, 10_000_000)
	}
	return sizes
}

func entriesName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "Mi"
	default:
		return strconv.Itoa(n>>10) + "Ki"
	}
}

// scaleIndex is a full index of n entries with 8 upstreams and the heap
// bytes per entry it took, built once per n.
type scaleIndex struct {
	ix       *Index
	ids      []ID
	perEntry float64
}

var scaleIndexes = struct {
	sync.Mutex
	m map[int]*scaleIndex
}{m: map[int]*scaleIndex{}}

func getScaleIndex(n int) *scaleIndex {
	scaleIndexes.Lock()
	defer scaleIndexes.Unlock()
	if si := scaleIndexes.m[n]; si != nil {
		return si
	}
	before := heapAlloc()
	ix, err := New(Config{MaxEntries: n})
	if err != nil {
		panic(err)
	}
	ids := make([]ID, 8)
	for i := range ids {
		ids[i], _ = ix.Intern(fmt.Sprintf("10.0.0.%d:8000", i))
	}
	fill(ix, n, ids)
	si := &scaleIndex{ix: ix, ids: ids, perEntry: float64(heapAlloc()-before) / float64(n)}
	scaleIndexes.m[n] = si
	return si
}

// BenchmarkEntries is one request's Depths over 8 candidates and Record,
// by index capacity. warm: the same 64-chunk conversation every time, one
// candidate holds it (every chunk found, in the CPU caches; Record
// refreshes them). spread: a different held conversation every time, so
// its entries are rarely in the CPU caches (includes ~0.2 µs to compute
// its 64 hashes); spread-depths the same without Record, which says what
// Record's LRU relinking adds. cold: 64 new chunks (Depths
// looks up all 64 and finds none; Record inserts 64 entries, evicting 64). B/entry is
// the heap the full index took, from runtime.MemStats.
func BenchmarkEntries(b *testing.B) {
	const chunks = 64
	for _, n := range scaleSizes() {
		si := getScaleIndex(n)
		ix, ids := si.ix, si.ids
		warm := hashes(fmt.Sprint("entries-warm", n), chunks)
		ix.Record(Scope{}, warm, ids[2])
		b.Run(fmt.Sprintf("warm/entries=%s", entriesName(n)), func(b *testing.B) {
			depths := make([]int, len(ids))
			b.ReportAllocs()
			clk := cputime.Start()
			for b.Loop() {
				ix.Depths(Scope{}, warm, ids, depths)
				ix.Record(Scope{}, warm, ids[2])
			}
			clk.Report(b)
			if depths[2] != chunks {
				b.Fatalf("Depths = %v, want %d at 2", depths, chunks)
			}
			b.ReportMetric(si.perEntry, "B/entry")
		})
		for _, record := range []bool{true, false} {
			name := "spread"
			if !record {
				name = "spread-depths"
			}
			b.Run(fmt.Sprintf("%s/entries=%s", name, entriesName(n)), func(b *testing.B) {
				// A different conversation every time, among the newer half
				// of the fill (held, so warm), recomputed as fill made it.
				depths := make([]int, len(ids))
				hs := make([]Hash, chunks)
				batches := uint64(n / 128)
				seq := uint64(n)
				b.ReportAllocs()
				clk := cputime.Start()
				for b.Loop() {
					seq = seq*6364136223846793005 + 1442695040888963407
					j := batches/2 + (seq>>33)%(batches-batches/2)
					for k := range hs {
						hs[k] = Hash(xxh3.HashSeed(nil, 128*j+uint64(k)))
					}
					ix.Depths(Scope{}, hs, ids, depths)
					if record {
						ix.Record(Scope{}, hs, ids[j%uint64(len(ids))])
					}
				}
				clk.Report(b)
				b.ReportMetric(si.perEntry, "B/entry")
			})
		}
		b.Run(fmt.Sprintf("cold/entries=%s", entriesName(n)), func(b *testing.B) {
			depths := make([]int, len(ids))
			hs := make([]Hash, chunks)
			next := uint64(1<<50) + uint64(n)<<20
			b.ReportAllocs()
			clk := cputime.Start()
			for b.Loop() {
				for k := range hs {
					next++
					hs[k] = Hash(next * 0x9e3779b97f4a7c15)
				}
				ix.Depths(Scope{}, hs, ids, depths)
				ix.Record(Scope{}, hs, ids[int(next)%len(ids)])
			}
			clk.Report(b)
			b.ReportMetric(si.perEntry, "B/entry")
		})
	}
}

// BenchmarkEntriesParallel is BenchmarkEntries/warm from every P, each
// goroutine with its own conversation.
func BenchmarkEntriesParallel(b *testing.B) {
	const chunks = 64
	for _, n := range scaleSizes() {
		si := getScaleIndex(n)
		ix, ids := si.ix, si.ids
		b.Run(fmt.Sprintf("warm/entries=%s", entriesName(n)), func(b *testing.B) {
			var g sync.Mutex
			seq := 0
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				g.Lock()
				seq++
				warm := hashes(fmt.Sprint("entries-parallel", n, seq), chunks)
				owner := ids[seq%len(ids)]
				g.Unlock()
				depths := make([]int, len(ids))
				for pb.Next() {
					ix.Depths(Scope{}, warm, ids, depths)
					ix.Record(Scope{}, warm, owner)
				}
			})
		})
	}
}

// BenchmarkDepthsCandidates is Depths over 4 to 256 candidates on the
// default index: the per-candidate part of a lookup. warm: one candidate
// holds all 64 chunks, three others the first 16 (an entry has at most
// MaxOwners = 4 owners, so at most four candidates are ever warm). cold:
// no candidate holds the first chunk.
func BenchmarkDepthsCandidates(b *testing.B) {
	const chunks = 64
	ix, err := New(Config{MaxEntries: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	all := make([]ID, 256)
	for i := range all {
		all[i], _ = ix.Intern(fmt.Sprintf("10.0.%d.%d:8000", i/250, 1+i%250))
	}
	warm := hashes("candidates-warm", chunks)
	for _, k := range []int{1, 2, 3} {
		ix.Record(Scope{}, warm[:chunks/4], all[k])
	}
	ix.Record(Scope{}, warm, all[0])
	cold := hashes("candidates-cold", chunks)
	for _, kind := range []string{"warm", "cold"} {
		hs := warm
		if kind == "cold" {
			hs = cold
		}
		for _, n := range []int{4, 16, 64, 256} {
			ids := all[:n]
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				depths := make([]int, n)
				b.ReportAllocs()
				clk := cputime.Start()
				for b.Loop() {
					ix.Depths(Scope{}, hs, ids, depths)
				}
				clk.Report(b)
			})
		}
	}
	runtime.KeepAlive(ix)
}

// BenchmarkInternNew is the cost of interning n new upstream names into an
// index, as happens when a pool first appears or a dynamic upstream
// source returns new addresses: each new name copies the name map, so
// interning n names copies n(n-1)/2 map entries.
func BenchmarkInternNew(b *testing.B) {
	for _, n := range []int{16, 256, 1024} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("10.%d.%d.%d:8000", i>>16, i>>8&255, i&255)
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			clk := cputime.Start()
			for b.Loop() {
				ix, err := New(Config{MaxEntries: 1024})
				if err != nil {
					b.Fatal(err)
				}
				for _, name := range names {
					if _, err := ix.Intern(name); err != nil {
						b.Fatal(err)
					}
				}
			}
			clk.Report(b)
		})
	}
}

// BenchmarkInternAllNew is BenchmarkInternNew with one InternAll call for
// the batch: one clone of the name table instead of one per name.
func BenchmarkInternAllNew(b *testing.B) {
	for _, n := range []int{16, 256, 1024} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("10.%d.%d.%d:8000", i>>16, i>>8&255, i&255)
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			dst := make([]ID, 0, n)
			b.ReportAllocs()
			clk := cputime.Start()
			for b.Loop() {
				ix, err := New(Config{MaxEntries: 1024})
				if err != nil {
					b.Fatal(err)
				}
				if dst, err = ix.InternAll(names, dst); err != nil {
					b.Fatal(err)
				}
			}
			clk.Report(b)
		})
	}
}
