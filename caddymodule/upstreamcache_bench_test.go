package caddymodule

import (
	"fmt"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
	"github.com/prefixcache/caddy-prefixcache/selection"

	"github.com/prefixcache/caddy-prefixcache/internal/cputime"
)

// BenchmarkUpstreamKeys measures the per-upstream work of Select outside
// the index and the choice: for every available upstream, its index ID and
// rendezvous key. intern is what Select did before the cache (Index.Intern, a map
// lookup of the Dial string, and xxh3.HashString of it, per upstream per
// request); cached is upstreamCache.table (one string comparison per
// upstream, which is a pointer comparison for a static pool, and one
// re-intern of a random upstream as a staleness check).
func BenchmarkUpstreamKeys(b *testing.B) {
	ix, err := prefixindex.New(prefixindex.Config{MaxEntries: 1 << 10})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{4, 16, 64, 256} {
		pool := benchPool(n)
		ids := make([]prefixindex.ID, 0, n)
		cands := make([]selection.Candidate, 0, n)
		b.Run(fmt.Sprintf("intern/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			clk := cputime.Start()
			for b.Loop() {
				ids, cands = ids[:0], cands[:0]
				for _, u := range pool {
					if !u.Available() {
						continue
					}
					id, err := ix.Intern(u.Dial)
					if err != nil {
						continue
					}
					ids = append(ids, id)
					cands = append(cands, selection.Candidate{Key: xxh3.HashString(u.Dial), Load: u.NumRequests()})
				}
			}
			clk.Report(b)
		})
		b.Run(fmt.Sprintf("cached/n=%d", n), func(b *testing.B) {
			var c upstreamCache
			b.ReportAllocs()
			clk := cputime.Start()
			for b.Loop() {
				ids, cands = ids[:0], cands[:0]
				tab := c.table(ix, pool)
				for i, u := range pool {
					if !u.Available() || tab.ids[i] == 0 {
						continue
					}
					ids = append(ids, tab.ids[i])
					cands = append(cands, selection.Candidate{Key: tab.keys[i], Load: u.NumRequests()})
				}
			}
			clk.Report(b)
		})
	}
}

// BenchmarkSelectProposed compares Select as it is (current) with
