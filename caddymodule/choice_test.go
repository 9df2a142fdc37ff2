package caddymodule

import (
	"math"
	"testing"
)

// TestValidateChoice checks the choice and cache_weight options as JSON
// (or a Go caller) may set them, past what the Caddyfile parser refuses.
func TestValidateChoice(t *testing.T) {
	off := int64(0)
	rate := int64(DefaultPrefillRate)
	weight := func(w float64) *float64 { return &w }
	tests := []struct {
		name   string
		choice string
		weight *float64
		rate   *int64
		want   string // error text, "" for nil
	}{
		{"unset", "", nil, nil, ""},
		{"rules", ChoiceRules, weight(0), &off, ""},
		{"cost", ChoiceCost, weight(1), &rate, ""},
		{"cost at the default rate", ChoiceCost, weight(0), nil, ""},
		{"cost with a large weight", ChoiceCost, weight(1e6), nil, ""},
		{"unknown choice", "fastest", nil, nil, `choice must be cost or rules, got "fastest"`},
		{"cost without prefill_rate", ChoiceCost, nil, &off, ""},
		{"negative weight", ChoiceCost, weight(-0.5), nil, "cache_weight must be finite and at least 0, got -0.5"},
		{"NaN weight", ChoiceCost, weight(math.NaN()), nil, "cache_weight must be finite and at least 0, got NaN"},
		{"infinite weight", ChoiceRules, weight(math.Inf(1)), nil, "cache_weight must be finite and at least 0, got +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := PrefixCacheSelection{ChunkSize: 256, MaxChunks: 2048, MaxEntries: 1, MaxBody: 1, MinMatch: 1, LoadFactor: 1.25,
				Choice: tt.choice, CacheWeight: tt.weight, PrefillRate: tt.rate}
			got := ""
			if err := s.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() with choice %q, cache_weight %v, prefill_rate %v = %q, want %q", tt.choice, tt.weight, tt.rate, got, tt.want)
			}
		})
	}
}
