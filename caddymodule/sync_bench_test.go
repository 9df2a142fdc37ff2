package caddymodule

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// BenchmarkReceivePlacement is what a flood of placements from the
// channel costs the receiving goroutine: one confirmation of n unique
// hashes under its own tenant scope, decoded and applied to a full index
// (on probation, as an unkeyed edge applies it), per op.
func BenchmarkReceivePlacement(b *testing.B) {
	for _, n := range []int{8, 128, 2048} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := &PrefixCacheSelection{
				MaxEntries: 1 << 16,
				Tenant:     "{http.request.header.Authorization}",
				SyncRaw:    json.RawMessage(`{"transport":"fake","bus":"bench-receive"}`),
			}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			if err := s.Provision(ctx); err != nil {
				b.Fatal(err)
			}
			defer s.Cleanup()
			pool := poolOf("10.8.0.1:8000")
			s.notePool(pool)
			s.upstreams.table(s.state.index, pool)
			m := edgesync.Message{Origin: 4242, Kind: edgesync.Confirmed, ChunkSize: prefixindex.DefaultChunkSize,
				Upstream: "10.8.0.1:8000", Hashes: make([]uint64, n)}
			msg := m.AppendBinary(nil)
			hashes := msg[edgesync.HeaderSize+len(m.Upstream):]
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			i := uint64(0)
			for b.Loop() {
				i++
				binary.LittleEndian.PutUint64(msg[24:], i*0x9e3779b97f4a7c15) // a tenant scope of its own
				for j := range n {
					binary.LittleEndian.PutUint64(hashes[8*j:], i<<32|uint64(j))
				}
				s.receive(msg)
			}
			if got := s.sync.applied[edgesync.Confirmed].Load(); got == 0 {
				b.Fatal("no placement applied")
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int(i)*n), "ns/hash")
		})
	}
}
