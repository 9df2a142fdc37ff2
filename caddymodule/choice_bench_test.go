package caddymodule

import (
	"bytes"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/internal/cputime"
)

// BenchmarkChoice is the time one request's choice takes under each
// choice, rules against cost, over 8 upstreams, for chat bodies of 2 KB,
// 32 KB and 256 KB of a warm conversation. stage=choose is s.choose
// alone on a routed request, what choice changes: a candidate per
// available upstream with its in-flight load and bytes, its prefill
// backlog and (cost) its prefill speed, the index's depths,
// Policy.Choose and the Record of the choice. stage=select is the whole
// of Select as Caddy calls it (peek, routing text, chunk hashes, choose,
// placeholders), what a request pays. Compare the choice= columns with
// benchstat -col /choice.
func BenchmarkChoice(b *testing.B) {
	pool := benchPool(8)
	for _, size := range []int{2 << 10, 32 << 10, 256 << 10} {
		body := genChatBody(size, uint64(size))
		for _, choice := range []string{ChoiceRules, ChoiceCost} {
			s := newChoiceSelection(b, choice)
			name := "size=" + sizeName(size) + "/choice=" + choice
			b.Run("stage=choose/"+name, func(b *testing.B) {
				br := newBenchRequest(bytes.Clone(body))
				p, v := s.route(br.r)
				if v == nil || v.skip != skipNone {
					b.Fatalf("request was not routed on: %+v", p)
				}
				defer endRequest(p)
				s.choose(pool, v, true) // warm from the first iteration
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				clk := cputime.Start()
				for b.Loop() {
					v.tried = v.tried[:0]
					if u, _, _ := s.choose(pool, v, true); u == nil {
						b.Fatal("choose returned nil")
					}
				}
				clk.Report(b)
			})
			b.Run("stage=select/"+name, func(b *testing.B) {
				benchSelect(b, s, pool, body, false)
			})
		}
	}
}

// newChoiceSelection provisions a PrefixCacheSelection with the defaults
// and the given choice (see provisionBench).
func newChoiceSelection(tb testing.TB, choice string) *PrefixCacheSelection {
	return provisionBench(tb, &PrefixCacheSelection{Choice: choice})
}

// TestChoiceAllocs checks that choosing, under either choice, allocates
// nothing in steady state: the path BenchmarkChoice times.
func TestChoiceAllocs(t *testing.T) {
	pool := benchPool(8)
	body := genChatBody(32<<10, 1)
	for _, choice := range []string{ChoiceRules, ChoiceCost} {
		s := newChoiceSelection(t, choice)
		br := newBenchRequest(bytes.Clone(body))
		p, v := s.route(br.r)
		if v == nil || v.skip != skipNone {
			t.Fatalf("request was not routed on: %+v", p)
		}
		s.choose(pool, v, true)
		allocs := testing.AllocsPerRun(100, func() {
			v.tried = v.tried[:0]
			s.choose(pool, v, true)
		})
		endRequest(p)
		if raceEnabled {
			continue // sync.Pool drops the scratch on purpose under the race detector; .ci/run checks this without it
		}
		if allocs != 0 {
			t.Errorf("choose with choice %s allocates %v times per request, want 0", choice, allocs)
		}
	}
}
