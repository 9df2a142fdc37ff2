package caddymodule

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// BenchmarkFlood floods a running Caddy's prefix_cache index with b.N
// unique prompts (every chunk of every prompt new) and reports what the
// index and the process heap hold afterwards. The figures of
// docs/robustness.md come from
//
//	go test -run '^$' -bench BenchmarkFlood -benchtime 2000000x -timeout 30m ./caddymodule
//
// A real config is loaded first (caddy.Load, a reverse_proxy with this
// policy), so the baseline is Caddy's own; the prompts are then routed
// through Select of an instance provisioned with the same chunk_size and
// max_entries, which shares that config's index (the caddy.UsagePool of
// state.go), as a second site of the config would. This skips the HTTP
// round trips, which cost ~100x the routing and add nothing the index
// keeps, so that 2 million prompts take seconds.
//
// Reported per run:
//
//	entries          index entries after the flood (<= max_entries)
//	index-MiB        the index's own accounting, Stats().Bytes
//	bound-MiB        the documented bound for max_entries and the upstreams
//	heap-growth-MiB  live heap after the flood minus the baseline with Caddy running
//	base-heap-MiB    live heap of the process with Caddy running, before the flood
//	caddy-base-MiB   of which Caddy's config added to the bare test process
//	peak-inuse-MiB   highest HeapInuse sampled during the flood (live + garbage)
//
// With b.N >= 4 x max_entries chunks' worth of prompts it fails if the
// index holds more than max_entries, if its accounting exceeds the bound,
// or if the heap grew by more than the bound plus 8 MiB (pools, scratch
// buffers and the allocator's slack).
func BenchmarkFlood(b *testing.B) {
	for _, maxEntries := range []int{1 << 16, prefixindex.DefaultMaxEntries} {
		b.Run(fmt.Sprintf("max_entries=%d", maxEntries), func(b *testing.B) {
			benchFlood(b, maxEntries)
		})
	}
}

// floodChunkSize is the chunking of the flooded index: the default.
const floodChunkSize = prefixindex.DefaultChunkSize

func benchFlood(b *testing.B, maxEntries int) {
	bare := floodLiveHeap()
	stop := floodStartCaddy(b, maxEntries)
	defer stop()
	s := floodSelection(b, maxEntries)
	pool := floodPool(4)
	base := floodLiveHeap()

	// One reusable request whose body gets a new stamp at its start every
	// iteration, so every chunk of every prompt is new to the index.
	body := chatForFlood(2 << 10)
	req := floodRequest(body)

	var peak uint64
	var ms runtime.MemStats
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		floodStamp(body, uint64(i))
		req.reset()
		if s.Select(pool, req.r, nil) == nil {
			b.Fatal("Select returned nil")
		}
		if i%(1<<18) == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	b.StopTimer()
	if p, _ := req.vars[varKey].(*peeked); p == nil || p.skip != skipNone || len(p.views) != 1 || len(p.views[0].hashes) < 4 {
		b.Fatalf("the flood's prompts were not routed on: %+v", p)
	}

	after := floodLiveHeap()
	st := s.state.index.Stats()
	bound := int64(46*maxEntries + 8704*prefixindex.DefaultShards + 17<<10)
	for _, u := range pool {
		bound += int64(len(u.Dial)) + 64
	}
	growth := int64(after) - int64(base)
	const mib = 1 << 20
	b.ReportMetric(float64(st.Entries), "entries")
	b.ReportMetric(float64(st.Bytes)/mib, "index-MiB")
	b.ReportMetric(float64(bound)/mib, "bound-MiB")
	b.ReportMetric(float64(growth)/mib, "heap-growth-MiB")
	b.ReportMetric(float64(base)/mib, "base-heap-MiB")
	b.ReportMetric(float64(int64(base)-int64(bare))/mib, "caddy-base-MiB")
	b.ReportMetric(float64(peak)/mib, "peak-inuse-MiB")
	runtime.KeepAlive(s)

	chunks := int64(b.N) * int64(len(body)/floodChunkSize)
	if chunks < 4*int64(maxEntries) {
		return // too few prompts to fill the index: nothing to check
	}
	if st.Entries > maxEntries {
		b.Errorf("after %d unique prompts the index holds %d entries, want at most max_entries %d", b.N, st.Entries, maxEntries)
	}
	if st.Bytes > bound {
		b.Errorf("after %d unique prompts the index accounts %d bytes, want at most the bound %d", b.N, st.Bytes, bound)
	}
	if growth > bound+8*mib {
		b.Errorf("after %d unique prompts the live heap grew by %d bytes over Caddy's baseline, want at most the bound %d + 8 MiB", b.N, growth, bound)
	}
}

// floodLiveHeap returns the live heap, after two collections (sync.Pool
// keeps a victim cache across one).
func floodLiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// floodStartCaddy runs a config with one reverse_proxy using this policy
// at maxEntries, and returns a function that stops it.
func floodStartCaddy(tb testing.TB, maxEntries int) (stop func()) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir, err := os.MkdirTemp("", "flood-storage")
	if err != nil {
		tb.Fatal(err)
	}
	cfg := fmt.Sprintf(`{
	"admin": {"disabled": true},
	"storage": {"module": "file_system", "root": %q},
	"logging": {"logs": {"default": {"writer": {"output": "discard"}}}},
	"apps": {"http": {"servers": {"flood": {
		"listen": [%q],
		"automatic_https": {"disable": true},
		"routes": [{"handle": [{
			"handler": "reverse_proxy",
			"upstreams": [{"dial": "10.255.0.1:8000"}, {"dial": "10.255.0.2:8000"}, {"dial": "10.255.0.3:8000"}, {"dial": "10.255.0.4:8000"}],
			"load_balancing": {"selection_policy": {"policy": "prefix_cache", "chunk_size": %d, "max_entries": %d}}
		}]}]
	}}}}
}`, dir, addr, floodChunkSize, maxEntries)
	if err := caddy.Load([]byte(cfg), true); err != nil {
		tb.Fatalf("loading config: %v", err)
	}
	return func() {
		if err := caddy.Stop(); err != nil {
			tb.Errorf("stopping Caddy: %v", err)
		}
		os.RemoveAll(dir)
	}
}

// floodSelection provisions an instance that shares the running config's
// index (same chunk_size and max_entries).
func floodSelection(tb testing.TB, maxEntries int) *PrefixCacheSelection {
	tb.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	s := &PrefixCacheSelection{ChunkSize: floodChunkSize, MaxEntries: maxEntries}
	if err := s.Provision(ctx); err != nil {
		cancel()
		tb.Fatal(err)
	}
	s.logger = caddy.Log() // INFO, as a config's logger would be
	tb.Cleanup(func() {
		_ = s.Cleanup()
		cancel()
	})
	return s
}

// floodPool is n upstreams as Caddy provisions static ones.
func floodPool(n int) reverseproxy.UpstreamPool {
	pool := make(reverseproxy.UpstreamPool, n)
	for i := range pool {
		pool[i] = &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: fmt.Sprintf("10.255.0.%d:8000", i+1)}
	}
	return pool
}

// chatForFlood returns a chat body of about size bytes whose first 16
// digits of system prompt the flood overwrites with a stamp.
func chatForFlood(size int) []byte {
	var sb bytes.Buffer
	sb.WriteString(`{"model":"m","messages":[{"role":"system","content":"0000000000000000 `)
	for i := 0; sb.Len() < size-64; i++ {
		fmt.Fprintf(&sb, "flood-word-%d ", i)
	}
	sb.WriteString(`"},{"role":"user","content":"hello"}]}`)
	return sb.Bytes()
}

// floodStampAt is where chatForFlood's stamp starts.
var floodStampAt = len(`{"model":"m","messages":[{"role":"system","content":"`)

// floodStamp writes n as 16 hex digits over the stamp of a chatForFlood body.
func floodStamp(body []byte, n uint64) {
	const hex = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		body[floodStampAt+i] = hex[n&15]
		n >>= 4
	}
}

// floodReq is one request reused across iterations: the body rewound and
// the routing state dropped each time.
type floodReq struct {
	r    *http.Request
	body *bytes.Reader
	raw  []byte
	vars map[string]any
}

type floodBody struct{ *bytes.Reader }

func (floodBody) Close() error { return nil }

func floodRequest(raw []byte) *floodReq {
	fr := &floodReq{raw: raw, body: bytes.NewReader(raw)}
	r := httptest.NewRequest(http.MethodPost, "http://llm.example/v1/chat/completions", nil)
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(raw))
	fr.r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), httptest.NewRecorder(), &caddyhttp.Server{})
	fr.vars = fr.r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	fr.reset()
	return fr
}

func (fr *floodReq) reset() {
	if p, ok := fr.vars[varKey].(*peeked); ok && p.replay != nil && p.replay.buf != nil {
		p.finish() // the previous request ended
	}
	fr.body.Reset(fr.raw)
	fr.r.Body = floodBody{fr.body}
	delete(fr.vars, varKey)
}
