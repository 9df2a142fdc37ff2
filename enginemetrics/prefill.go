package enginemetrics

// PrefillMeter measures an engine's prefill speed from the two counters
// of its scrapes, prompt tokens computed and seconds spent prefilling:
// their ratio over a window that ends once it has seen MinPrefillTokens
// computed, smoothed over windows. The zero value has seen no scrape.
type PrefillMeter struct {
	started         bool
	tokens, seconds float64 // the counters where the current window began
	rate            float64 // tokens per second; 0 until a window ends
}

// Bounds of a measured prefill speed.
const (
	// MinPrefillTokens is the evidence of one window: a step's token
	// budget or two of vLLM's and SGLang's, so that one short prompt's
	// timing does not set the rate.
	MinPrefillTokens = 16384
	// PrefillSmoothing is the weight of a window's rate in the rate.
	PrefillSmoothing = 0.25
	// Rates beyond these are not an engine's: a counter reset or a lie.
	MinPrefillRate, MaxPrefillRate = 16, 1e8 // tokens per second
)

// Rate is the measured speed in tokens per second, or 0 before the
// first window ends.
func (m PrefillMeter) Rate() float64 { return m.rate }

// Next is the meter after a scrape that said s. A scrape without the
// counters leaves the rate and ends the window; counters that went down
// (the engine restarted) start a new one; a window's rate outside
// [MinPrefillRate, MaxPrefillRate] is not taken.
func (m PrefillMeter) Next(s Sample) PrefillMeter {
	tokens, seconds := s.PrefillTokens, s.PrefillSeconds
	switch {
	case tokens < 0 || seconds < 0:
		return PrefillMeter{rate: m.rate}
	case !m.started || tokens < m.tokens || seconds < m.seconds:
		return PrefillMeter{started: true, tokens: tokens, seconds: seconds, rate: m.rate}
	}
	dt, ds := tokens-m.tokens, seconds-m.seconds
	if dt < MinPrefillTokens || ds <= 0 {
		return m
	}
	r := dt / ds
	if r < MinPrefillRate || r > MaxPrefillRate {
		return PrefillMeter{started: true, tokens: tokens, seconds: seconds, rate: m.rate}
	}
	if m.rate > 0 {
		r = m.rate + PrefillSmoothing*(r-m.rate)
	}
	return PrefillMeter{started: true, tokens: tokens, seconds: seconds, rate: r}
}
