package fleet

import (
	"sync"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/enginemetrics"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// every reads every signal: the queue at the engine's speed, the tier's
// reports and the engine's queue.
var every = &Options{NsPerByte: 1e9 / 65536, Tier: true, EngineQueue: true, EnginePrefill: true, EngineStale: time.Hour, BytesPerToken: 4}

// The request path allocates nothing: Read per candidate, Place per
// attempt, Settle per request, with every signal on and fed.
func TestRequestPathAllocs(t *testing.T) {
	var f Fleet
	now := time.Now()
	f.Scraped(1, "a:1", now.UnixNano(), enginemetrics.Sample{Running: 3, Waiting: 1, PrefillTokens: 1000, PrefillSeconds: 1}, 0)
	f.Report(9, now, []Load{{ID: 1, Upstream: "a:1", Requests: 2, Bytes: 500, Sent: 100}}, every)
	ns := now.UnixNano()
	var sink State
	if n := testing.AllocsPerRun(100, func() {
		for id := range prefixindex.ID(8) {
			sink = f.Read(id, "a:1", ns, every)
		}
	}); n != 0 {
		t.Errorf("Read of 8 candidates: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		var tk Ticket
		f.Place(&tk, 1, "a:1", ns, 4096, 1024, every)
		f.Place(&tk, 2, "b:1", ns, 4096, 4096, every)
		tk.Settle()
	}); n != 0 {
		t.Errorf("Place, Place again, Settle: %v allocations, want 0", n)
	}
	_ = sink
}

// Requests placed and settled on many goroutines while reports, scrapes,
// answers and reads run beside them leave nothing in flight, and every
// reader sees a consistent, never negative, state. Run with -race.
func TestConcurrentUse(t *testing.T) {
	var f Fleet
	ix, err := prefixindex.New(prefixindex.Config{MaxEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := ix.Intern("a:1")
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				var tk Ticket
				ns := start.UnixNano() + int64(i)
				f.Place(&tk, id, "a:1", ns, int64(100+g), int64(10+g), every)
				if s := f.Read(id, "a:1", ns, every); s.Bytes <= 0 || s.Queued < 0 || s.Queued > s.Uncached+s.RemoteBytes {
					t.Errorf("Read while a request is in flight = %+v", s)
					return
				}
				tk.Settle()
			}
		})
	}
	wg.Go(func() {
		loads := make([]Load, 1)
		for i := range 200 {
			loads[0] = Load{ID: id, Upstream: "a:1", Requests: int64(i % 5), Bytes: int64(i), Sent: uint64(i * 10)}
			f.Report(uint64(i%3), start, loads, every)
			f.Expire(start)
		}
	})
	wg.Go(func() {
		for i := range 200 {
			f.Scraped(id, "a:1", start.UnixNano(), enginemetrics.Sample{Running: float64(i % 7), Waiting: 0, PrefillTokens: float64(i * 100), PrefillSeconds: float64(i)}, 1)
			o := f.Answered(id, Answer{PromptTokens: 100, CachedTokens: int64(i % 100), RoutedBytes: 400, PredictedBytes: 200})
			f.LearnCapacity(ix, id, uint32(i*10), o)
		}
	})
	wg.Wait()
	if s := f.Read(id, "a:1", start.UnixNano(), every); s.Bytes != 0 || s.Uncached != 0 {
		t.Errorf("after every request settled: %+v, want nothing of this edge's in flight", s)
	}
	if a, ok := f.Answers(id); !ok || a.Answers != 200 {
		t.Errorf("Answers = %+v, %v; want 200 answers", a, ok)
	}
}

// BenchmarkRead is the per-candidate cost of reading the fleet on the
// choice path, with every signal on.
func BenchmarkRead(b *testing.B) {
	var f Fleet
	now := time.Now()
	for id := range prefixindex.ID(8) {
		f.Scraped(id, "a:1", now.UnixNano(), enginemetrics.Sample{Running: 3, Waiting: 1, PrefillTokens: 1000, PrefillSeconds: 1}, 0)
	}
	ns := now.UnixNano()
	b.ReportAllocs()
	var sink State
	for b.Loop() {
		for id := range prefixindex.ID(8) {
			sink = f.Read(id, "a:1", ns, every)
		}
	}
	_ = sink
}
