package fleet

import (
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/enginemetrics"
)

// An upstream's prefill speed is its engine's while the engine's scrapes
// are fresh, and the configured one otherwise: before the first window,
// once stale, for another upstream that reuses the ID, and without
// EnginePrefill.
func TestSpeedFallsBackToConfigured(t *testing.T) {
	const configured = 1e9 / 65536.0
	now := time.Now().UnixNano()
	var f Fleet
	o := &Options{NsPerByte: configured, EnginePrefill: true, EngineStale: time.Second, BytesPerToken: 4}
	speed := func(upstream string, now int64) float64 { return f.Read(1, upstream, now, o).NsPerByte }
	if got := speed("a:1", now); got != configured {
		t.Errorf("before any scrape: %v ns per byte, want the configured %v", got, configured)
	}
	f.Scraped(1, "a:1", now, enginemetrics.Sample{PrefillTokens: 0, PrefillSeconds: 0}, 0)
	if got := speed("a:1", now); got != configured {
		t.Errorf("before a window ends: %v ns per byte, want the configured %v", got, configured)
	}
	f.Scraped(1, "a:1", now, enginemetrics.Sample{PrefillTokens: 100000, PrefillSeconds: 2}, 0) // 50,000 tokens/s
	measured := 1e9 / (50000 * 4.0)
	if got := speed("a:1", now); got != measured {
		t.Errorf("measured 50,000 tokens/s at 4 bytes a token: %v ns per byte, want %v", got, measured)
	}
	if got := speed("b:1", now); got != configured {
		t.Errorf("another upstream on the ID: %v ns per byte, want the configured %v", got, configured)
	}
	if got := speed("a:1", now+int64(2*time.Second)); got != configured {
		t.Errorf("stale scrape: %v ns per byte, want the configured %v", got, configured)
	}
	o.EnginePrefill = false
	if got := speed("a:1", now); got != configured {
		t.Errorf("prefill off: %v ns per byte, want the configured %v", got, configured)
	}
}

// With EngineQueue, what an engine runs and queues beyond this edge's
// requests counts while its sample is fresh, as the larger of it and
// the tier's reports.
func TestEngineOthers(t *testing.T) {
	var f Fleet
	now := time.Now().UnixNano()
	o := &Options{Tier: true, EngineQueue: true, EngineStale: time.Second}
	f.Scraped(1, "a:1", now, enginemetrics.Sample{Running: 6, Waiting: 4}, 3)
	if got := f.Read(1, "a:1", now, o).RemoteRequests; got != 7 {
		t.Errorf("an engine with 10 requests, 3 of them this edge's: %d remote requests, want 7", got)
	}
	f.Report(9, time.Unix(0, now), []Load{{ID: 1, Requests: 9}}, o)
	if got := f.Read(1, "a:1", now, o).RemoteRequests; got != 9 {
		t.Errorf("with another edge reporting 9: %d remote requests, want the larger, 9", got)
	}
	f.Report(9, time.Unix(0, now), nil, o)
	if got := f.Read(1, "a:1", now+int64(2*time.Second), o).RemoteRequests; got != 0 {
		t.Errorf("stale sample: %d remote requests, want 0", got)
	}
	if got := f.Read(1, "b:1", now, o).RemoteRequests; got != 0 {
		t.Errorf("another upstream on the ID: %d remote requests, want 0", got)
	}
	if e, ok := f.Engine(1, "a:1"); !ok || e.Others != 7 || e.At != now {
		t.Errorf("Engine(1) = %+v, %v; want the sample with 7 others", e, ok)
	}
}
