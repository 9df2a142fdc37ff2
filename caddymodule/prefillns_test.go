package caddymodule

import (
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/enginemetrics"
)

// An upstream's prefill speed is its engine's while the engine's scrapes
// are fresh, and prefill_rate's otherwise: before the first window, once
// stale, for another upstream that reuses the ID, and without prefill.
func TestPrefillNsFallsBackToPrefillRate(t *testing.T) {
	const configured = 1e9 / 65536.0
	now := time.Now().UnixNano()
	s := &PrefixCacheSelection{
		nsPerByte: configured, enginePrefill: true, engineStale: time.Second,
		state: &sharedState{}, EngineMetrics: &EngineMetrics{BytesPerToken: 4},
	}
	if got := s.prefillNs(1, "a:1", now); got != configured {
		t.Errorf("before any scrape: %v ns per byte, want prefill_rate's %v", got, configured)
	}
	table := s.state.engineTable()
	var meter enginemetrics.PrefillMeter
	meter = meter.Next(enginemetrics.Sample{PrefillTokens: 0, PrefillSeconds: 0})
	table.samples[1].Store(&engineSample{dial: "a:1", at: now, prefill: meter})
	if got := s.prefillNs(1, "a:1", now); got != configured {
		t.Errorf("before a window ends: %v ns per byte, want prefill_rate's %v", got, configured)
	}
	meter = meter.Next(enginemetrics.Sample{PrefillTokens: 100000, PrefillSeconds: 2}) // 50,000 tokens/s
	table.samples[1].Store(&engineSample{dial: "a:1", at: now, prefill: meter})
	measured := 1e9 / (50000 * 4.0)
	if got := s.prefillNs(1, "a:1", now); got != measured {
		t.Errorf("measured 50,000 tokens/s at 4 bytes a token: %v ns per byte, want %v", got, measured)
	}
	if got := s.prefillNs(1, "b:1", now); got != configured {
		t.Errorf("another upstream on the ID: %v ns per byte, want prefill_rate's %v", got, configured)
	}
	if got := s.prefillNs(1, "a:1", now+int64(2*time.Second)); got != configured {
		t.Errorf("stale scrape: %v ns per byte, want prefill_rate's %v", got, configured)
	}
	s.enginePrefill = false
	if got := s.prefillNs(1, "a:1", now); got != configured {
		t.Errorf("prefill off: %v ns per byte, want prefill_rate's %v", got, configured)
	}
}
