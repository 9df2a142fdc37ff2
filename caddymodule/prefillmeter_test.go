package caddymodule

import (
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/caddymodule/enginemetrics"
)

// The meter's rate is computed tokens over prefill seconds, taken over
// windows of at least minPrefillTokens and smoothed; a restart, a lie or
// an engine that stops publishing never sets it.
func TestPrefillMeter(t *testing.T) {
	const w = minPrefillTokens
	fresh := prefillMeter{tokens: -1, seconds: -1}
	for _, tc := range []struct {
		name  string
		reads [][2]float64 // tokens, seconds
		want  float64
	}{
		{"no reading", nil, 0},
		{"one reading is no window", [][2]float64{{5 * w, 10}}, 0},
		{"a window", [][2]float64{{0, 0}, {w, 0.5}}, 2 * w},
		{"too few tokens keep the window open", [][2]float64{{0, 0}, {w / 2, 0.25}, {w, 0.5}}, 2 * w},
		{"windows are smoothed", [][2]float64{{0, 0}, {w, 0.5}, {2 * w, 1.5}}, 2*w + prefillSmoothing*(w-2*w)},
		{"a restart opens a new window", [][2]float64{{0, 0}, {w, 0.5}, {100, 0.1}, {100 + w, 0.1 + 0.25}}, 2*w + prefillSmoothing*(4*w-2*w)},
		{"no seconds spent is no rate", [][2]float64{{0, 5}, {2 * w, 5}}, 0},
		{"a rate no engine has is ignored", [][2]float64{{0, 0}, {1e12, 1}}, 0},
		{"an engine that stops publishing keeps its rate", [][2]float64{{0, 0}, {w, 0.5}, {-1, -1}}, 2 * w},
		{"and starts a new window when it publishes again", [][2]float64{{0, 0}, {w, 0.5}, {-1, -1}, {5 * w, 9}, {6 * w, 9.25}}, 2*w + prefillSmoothing*(4*w-2*w)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := fresh
			for _, r := range tc.reads {
				m = m.next(r[0], r[1])
			}
			if m.rate != tc.want {
				t.Errorf("rate %v, want %v", m.rate, tc.want)
			}
		})
	}
}

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
	table.samples[1].Store(&engineSample{Sample: enginemetrics.Sample{}, dial: "a:1", at: now, prefill: prefillMeter{rate: 0}})
	if got := s.prefillNs(1, "a:1", now); got != configured {
		t.Errorf("before a window ends: %v ns per byte, want prefill_rate's %v", got, configured)
	}
	table.samples[1].Store(&engineSample{dial: "a:1", at: now, prefill: prefillMeter{rate: 50000}})
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
