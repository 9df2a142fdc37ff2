package selection

import (
	"fmt"
	"math/rand/v2"
	"testing"
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
