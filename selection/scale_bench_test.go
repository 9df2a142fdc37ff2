package selection

import (
	"fmt"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/internal/cputime"
)

// BenchmarkChooseParts splits BenchmarkChoose by what grows with the
// number of candidates: bound is Policy.Bound alone (one pass summing
// loads), score is the rendezvous score of every candidate alone, choose
// the whole of Choose (one pass that scores each candidate once and keeps
// the best of each kind). Choose is linear in the candidates by design
// (rendezvous hashing must score them all); these say what the constant is.
func BenchmarkChooseParts(b *testing.B) {
	p := Policy{LoadFactor: DefaultLoadFactor, Allowance: DefaultAllowance, MinDepth: DefaultMinDepth}
	for _, n := range []int{4, 16, 64, 256} {
		cands := benchCands(n, true)
		b.Run(fmt.Sprintf("bound/n=%d", n), func(b *testing.B) {
			sink := 0
			b.ReportAllocs()
			clk := cputime.Start()
			for b.Loop() {
				sink += p.Bound(cands)
			}
			clk.Report(b)
			benchSink = sink
		})
		b.Run(fmt.Sprintf("score/n=%d", n), func(b *testing.B) {
			var placement, sink uint64
			b.ReportAllocs()
			clk := cputime.Start()
			for b.Loop() {
				placement += 0x9e3779b97f4a7c15
				for i := range cands {
					sink ^= score(placement, cands[i].Key)
				}
			}
			clk.Report(b)
			benchSink = int(sink)
		})
		b.Run(fmt.Sprintf("choose/n=%d", n), func(b *testing.B) {
			placement, sink := uint64(0), 0
			b.ReportAllocs()
			clk := cputime.Start()
			for b.Loop() {
				placement += 0x9e3779b97f4a7c15
				sink += p.Choose(cands, placement, 0).Index
			}
			clk.Report(b)
			benchSink = sink
		})
	}
}
