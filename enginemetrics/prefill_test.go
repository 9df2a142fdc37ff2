package enginemetrics

import "testing"

// The meter's rate is computed tokens over prefill seconds, taken over
// windows of at least MinPrefillTokens and smoothed; a restart, a lie or
// an engine that stops publishing never sets it.
func TestPrefillMeter(t *testing.T) {
	const w = MinPrefillTokens
	for _, tc := range []struct {
		name  string
		reads [][2]float64 // tokens, seconds; -1 when not published
		want  float64
	}{
		{"no reading", nil, 0},
		{"one reading is no window", [][2]float64{{5 * w, 10}}, 0},
		{"a window", [][2]float64{{0, 0}, {w, 0.5}}, 2 * w},
		{"too few tokens keep the window open", [][2]float64{{0, 0}, {w / 2, 0.25}, {w, 0.5}}, 2 * w},
		{"windows are smoothed", [][2]float64{{0, 0}, {w, 0.5}, {2 * w, 1.5}}, 2*w + PrefillSmoothing*(w-2*w)},
		{"a restart opens a new window", [][2]float64{{0, 0}, {w, 0.5}, {100, 0.1}, {100 + w, 0.1 + 0.25}}, 2*w + PrefillSmoothing*(4*w-2*w)},
		{"no seconds spent is no rate", [][2]float64{{0, 5}, {2 * w, 5}}, 0},
		{"a rate no engine has is ignored", [][2]float64{{0, 0}, {1e12, 1}}, 0},
		{"an engine that stops publishing keeps its rate", [][2]float64{{0, 0}, {w, 0.5}, {-1, -1}}, 2 * w},
		{"and starts a new window when it publishes again", [][2]float64{{0, 0}, {w, 0.5}, {-1, -1}, {5 * w, 9}, {6 * w, 9.25}}, 2*w + PrefillSmoothing*(4*w-2*w)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m PrefillMeter
			for _, r := range tc.reads {
				m = m.Next(Sample{PrefillTokens: r[0], PrefillSeconds: r[1]})
			}
			if m.Rate() != tc.want {
				t.Errorf("rate %v, want %v", m.Rate(), tc.want)
			}
		})
	}
}
