package caddymodule

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/prefixcache/caddy-prefixcache/dialect"
	"github.com/prefixcache/caddy-prefixcache/internal/cputime"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// newLimitSelection provisions a PrefixCacheSelection with the given
// chunk_size and max_chunks and the other defaults.
func newLimitSelection(tb testing.TB, chunkSize, maxChunks int) *PrefixCacheSelection {
	tb.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	s := &PrefixCacheSelection{ChunkSize: chunkSize, MaxChunks: maxChunks}
	if err := s.Provision(ctx); err != nil {
		cancel()
		tb.Fatal(err)
	}
	s.logger = caddy.Log()
	tb.Cleanup(func() {
		_ = s.Cleanup()
		cancel()
	})
	return s
}

// TestDeriveRendersToMaxChunks: derive renders only the text max_chunks
// chunks hold, and routes exactly as rendering all of it would: the same
// chunk hashes, the placement key of the whole text's clamped to the
// limit, and a prompt length that is the whole text's (exact when no
// escape is skipped, at most 5 bytes more per backslash otherwise).
func TestDeriveRendersToMaxChunks(t *testing.T) {
	long := strings.Repeat(`a long \"quoted\" line\n`, 200)
	bodies := map[string][]byte{
		"chat 1KB":   genChatBody(1<<10, 1),
		"chat 16KB":  genChatBody(16<<10, 2),
		"chat 128KB": genChatBody(128<<10, 3),
		"no escapes": []byte(`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("x", 5000) + `"},{"role":"user","content":"hi"}]}`),
		"late user":  []byte(`{"model":"m","messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"` + long + `"},{"role":"user","content":"again"}]}`),
		"completion": []byte(`{"model":"m","prompt":"` + long + `","cache_salt":"tenant-a"}`),
		"anthropic":  []byte(`{"model":"claude","system":"` + long + `","messages":[{"role":"user","content":[{"type":"tool_result","content":"` + long + `"}]}]}`),
	}
	for _, cfg := range []struct{ chunk, max int }{{64, 8}, {256, 2048}, {16, 1}, {100, 3}} {
		s := newLimitSelection(t, cfg.chunk, cfg.max)
		limit := cfg.chunk * cfg.max
		for name, body := range bodies {
			full, req, err := dialect.Append(nil, body)
			if err != nil {
				t.Fatalf("%s: Append error %v", name, err)
			}
			p := routeView(s, newBenchRequest(body).r)
			if p.skip != skipNone {
				t.Fatalf("chunk %d x %d, %s: skipped (%v)", cfg.chunk, cfg.max, name, p.skip)
			}
			seed := prefixindex.Seed(req.Model, req.CacheSalt, nil)
			if want := s.chunker.Append(nil, seed, full); !slices.Equal(p.hashes, want) {
				t.Errorf("chunk %d x %d, %s: %d hashes, want the %d of the whole text", cfg.chunk, cfg.max, name, len(p.hashes), len(want))
			}
			if want := placementKey(seed, full[:min(req.Placement, limit)]); p.placement != want {
				t.Errorf("chunk %d x %d, %s: placement key %x, want %x (of %d bytes)", cfg.chunk, cfg.max, name, p.placement, want, min(req.Placement, limit))
			}
			slack := 5 * bytes.Count(body, []byte{'\\'})
			exact := len(full) <= limit || slack == 0
			if p.textLen < len(full) || p.textLen > len(full)+slack || exact && p.textLen != len(full) {
				t.Errorf("chunk %d x %d, %s: textLen %d, want %d (at most %d more past the limit)", cfg.chunk, cfg.max, name, p.textLen, len(full), slack)
			}
		}
	}
}

// TestDeriveInvalidEscapePastLimit pins the one difference of a limited
// rendering: an invalid escape in a string skipped past the limit is not
// seen, so the request is routed (on the valid text before it) rather
// than left to the fallback policy; the upstream rejects the body itself.
func TestDeriveInvalidEscapePastLimit(t *testing.T) {
	s := newLimitSelection(t, 64, 4)
	head := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 400) + `"},{"role":"assistant","content":"`
	bad := []byte(head + `bad \q escape"}]}`)
	good := []byte(head + `bad \n escape"}]}`)
	if _, _, err := dialect.Append(nil, bad); err == nil {
		t.Fatalf("Append(invalid escape) error = nil, want ErrSyntax")
	}
	pb := routeView(s, newBenchRequest(bad).r)
	pg := routeView(s, newBenchRequest(good).r)
	if pb.skip != skipNone || !slices.Equal(pb.hashes, pg.hashes) || pb.placement != pg.placement || pb.textLen != pg.textLen {
		t.Errorf("route(invalid escape past the limit) = skip %q, %d hashes, textLen %d; want routed as the valid body: %d hashes, textLen %d",
			pb.skip, len(pb.hashes), pb.textLen, len(pg.hashes), pg.textLen)
	}
	// Before the limit, the same escape sends the request to the fallback.
	early := []byte(`{"model":"m","messages":[{"role":"user","content":"bad \q escape"}]}`)
	if p := routeView(s, newBenchRequest(early).r); p.skip != skipNotJSON {
		t.Errorf("route(invalid escape before the limit) skip = %q, want %q", p.skip, skipNotJSON)
	}
}

// BenchmarkRenderLimit is route (peek, text, hashes, placement key) and
// a warm Select on chat bodies of 256 KB and 1 MB, with the default
// max_chunks (2048 x 256 B = 512 KiB of text rendered at most) and with
// max_chunks 512 (128 KiB): what a lower max_chunks would save.
func BenchmarkRenderLimit(b *testing.B) {
	pool := benchPool(8)
	for _, maxChunks := range []int{prefixindex.DefaultMaxChunks, 512} {
		s := newLimitSelection(b, prefixindex.DefaultChunkSize, maxChunks)
		for _, size := range []int{256 << 10, 1 << 20} {
			body := genChatBody(size, uint64(size))
			name := "max_chunks=" + strconv.Itoa(maxChunks) + "/" + sizeName(size)
			b.Run("route/"+name, func(b *testing.B) {
				br := newBenchRequest(body)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				clk := cputime.Start()
				for b.Loop() {
					br.reset()
					if p := routeView(s, br.r); p.skip != skipNone {
						b.Fatal(p.skip)
					}
				}
				clk.Report(b)
			})
			b.Run("select/"+name, func(b *testing.B) {
				benchSelect(b, s, pool, body, false)
			})
		}
	}
}
