package selection

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/internal/cputime"
)

// benchCands returns n candidates with varied loads; warm ones let about a
// quarter of the candidates hold the prefix at depths from 4 to 63 chunks.
func benchCands(n int, warm bool) []Candidate {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	cands := make([]Candidate, n)
	for i := range cands {
		cands[i] = Candidate{Key: dialKey(i), Depth: rng.IntN(4), Load: rng.IntN(32)}
		if warm && rng.IntN(4) == 0 {
			cands[i].Depth = 4 + rng.IntN(60)
		}
	}
	return cands
}

var benchSink int

func BenchmarkChoose(b *testing.B) {
	p := Policy{LoadFactor: DefaultLoadFactor, Allowance: DefaultAllowance, MinDepth: DefaultMinDepth}
	for _, kind := range []string{"warm", "cold"} {
		for _, n := range []int{4, 16, 64, 256} {
			cands := benchCands(n, kind == "warm")
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				b.ReportAllocs()
				placement, sink := uint64(0), 0
				for b.Loop() {
					placement += 0x9e3779b97f4a7c15
					sink += p.Choose(cands, placement, 0).Index
				}
				benchSink = sink
			})
		}
	}
}

// BenchmarkChooseCost is Choose under the rules (with the cold bound and
// ColdBacklog, as caddymodule configures them) and under Policy.Cost, on
// the same candidates, which carry backlogs and prefill speeds.
func BenchmarkChooseCost(b *testing.B) {
	rules := Policy{LoadFactor: DefaultLoadFactor, Allowance: DefaultAllowance, MinDepth: DefaultMinDepth,
		ColdLoadFactor: DefaultColdLoadFactor, ColdBacklog: true}
	cost := Policy{LoadFactor: DefaultLoadFactor, Allowance: DefaultAllowance, MinDepth: DefaultMinDepth,
		Cost: true, ChunkSize: 256, NsPerByte: 1e9 / (64 << 10), CacheWeight: DefaultCacheWeight}
	for _, kind := range []string{"warm", "cold"} {
		for _, n := range []int{8, 64} {
			cands := benchCands(n, kind == "warm")
			for i := range cands {
				cands[i].Backlog = int64(i%3) << 14
				cands[i].NsPerByte = float64(1+i%2) * 1e9 / (64 << 10)
			}
			for _, p := range []struct {
				name string
				Policy
			}{{"rules", rules}, {"cost", cost}} {
				b.Run(fmt.Sprintf("%s/n=%d/choice=%s", kind, n, p.name), func(b *testing.B) {
					b.ReportAllocs()
					placement, sink := uint64(0), 0
					clk := cputime.Start()
					for b.Loop() {
						placement += 0x9e3779b97f4a7c15
						sink += p.Choose(cands, placement, 32<<10).Index
					}
					clk.Report(b)
					benchSink = sink
				})
			}
		}
	}
}
