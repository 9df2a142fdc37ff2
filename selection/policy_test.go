package selection

import (
	"math"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want string // error text, "" for nil
	}{
		{"defaults", Policy{LoadFactor: DefaultLoadFactor, Allowance: DefaultAllowance, MinDepth: DefaultMinDepth}, ""},
		{"smallest valid", Policy{LoadFactor: 1, Allowance: 0, MinDepth: 1}, ""},
		{"zero value", Policy{}, "load_factor must be at least 1, got 0"},
		{"load factor below 1", Policy{LoadFactor: 0.5, Allowance: 16, MinDepth: 4}, "load_factor must be at least 1, got 0.5"},
		{"load factor NaN", Policy{LoadFactor: math.NaN(), Allowance: 16, MinDepth: 4}, "load_factor must be at least 1, got NaN"},
		{"load factor infinite", Policy{LoadFactor: math.Inf(1), Allowance: 16, MinDepth: 4}, "load_factor must be finite, got +Inf"},
		{"negative allowance", Policy{LoadFactor: 1.25, Allowance: -1, MinDepth: 4}, "allowance must be at least 0, got -1"},
		{"zero min depth", Policy{LoadFactor: 1.25, Allowance: 16}, "min_depth must be at least 1, got 0"},
		{"negative min depth", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: -3}, "min_depth must be at least 1, got -3"},
		{"default cold load factor", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: DefaultColdLoadFactor}, ""},
		{"cold load factor equal to load factor", Policy{LoadFactor: 1.5, Allowance: 16, MinDepth: 4, ColdLoadFactor: 1.5}, ""},
		{"cold load factor below 1", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: 0.5}, "cold_load_factor must be 0 (off) or between 1 and load_factor (1.25), got 0.5"},
		{"cold load factor above load factor", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: 2}, "cold_load_factor must be 0 (off) or between 1 and load_factor (1.25), got 2"},
		{"cold load factor NaN", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: math.NaN()}, "cold_load_factor must be 0 (off) or between 1 and load_factor (1.25), got NaN"},
		{"cost", Policy{LoadFactor: 1.25, MinDepth: 4, Cost: true, ChunkSize: 256, NsPerByte: 15258.8, CacheWeight: DefaultCacheWeight}, ""},
		{"cost with no speed and weight 0", Policy{LoadFactor: 1.25, MinDepth: 4, Cost: true, ChunkSize: 1}, ""},
		{"cost without chunk size", Policy{LoadFactor: 1.25, MinDepth: 4, Cost: true, NsPerByte: 1}, "chunk_size must be at least 1, got 0"},
		{"chunk size unread without cost", Policy{LoadFactor: 1.25, MinDepth: 4}, ""},
		{"negative cache weight", Policy{LoadFactor: 1.25, MinDepth: 4, CacheWeight: -1}, "cache_weight must be finite and at least 0, got -1"},
		{"cache weight NaN", Policy{LoadFactor: 1.25, MinDepth: 4, CacheWeight: math.NaN()}, "cache_weight must be finite and at least 0, got NaN"},
		{"cache weight infinite", Policy{LoadFactor: 1.25, MinDepth: 4, CacheWeight: math.Inf(1)}, "cache_weight must be finite and at least 0, got +Inf"},
		{"negative prefill time", Policy{LoadFactor: 1.25, MinDepth: 4, NsPerByte: -1}, "prefill time per byte must be finite and at least 0, got -1"},
		{"prefill time NaN", Policy{LoadFactor: 1.25, MinDepth: 4, NsPerByte: math.NaN()}, "prefill time per byte must be finite and at least 0, got NaN"},
		{"prefill time infinite", Policy{LoadFactor: 1.25, MinDepth: 4, NsPerByte: math.Inf(1)}, "prefill time per byte must be finite and at least 0, got +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("%+v.Validate() = %q, want %q", tt.p, got, tt.want)
			}
		})
	}
}

// loads returns candidates with the given in-flight loads.
func loads(ls ...int) []Candidate {
	cs := make([]Candidate, len(ls))
	for i, l := range ls {
		cs[i] = Candidate{Key: uint64(i), Load: l}
	}
	return cs
}

func TestBound(t *testing.T) {
	tests := []struct {
		name  string
		p     Policy
		cands []Candidate
		want  int
	}{
		{"no candidates", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4}, nil, 0},
		// ceil(1.25 * 11 / 4) = ceil(3.4375)
		{"bounded loads capacity", Policy{LoadFactor: 1.25, MinDepth: 4}, loads(1, 2, 3, 4), 4},
		{"allowance is added", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4}, loads(1, 2, 3, 4), 20},
		// ceil(1.25 * 1 / 8): the incoming request counts.
		{"idle fleet", Policy{LoadFactor: 1.25, MinDepth: 4}, loads(0, 0, 0, 0, 0, 0, 0, 0), 1},
		{"exact quotient", Policy{LoadFactor: 1, MinDepth: 4}, loads(2, 2), 3},
		{"factor 2", Policy{LoadFactor: 2, MinDepth: 4}, loads(3, 0, 0), 3},
		{"single candidate", Policy{LoadFactor: 1.25, MinDepth: 4}, loads(100), 127},
		// Invalid policies stay defined.
		{"zero factor", Policy{Allowance: 5, MinDepth: 4}, loads(7, 7), 5},
		{"NaN factor", Policy{LoadFactor: math.NaN(), Allowance: 5, MinDepth: 4}, loads(7, 7), 5},
		{"negative factor", Policy{LoadFactor: -1, MinDepth: 4}, loads(7, 7), 0},
		{"infinite factor", Policy{LoadFactor: math.Inf(1), MinDepth: 4}, loads(1), math.MaxInt32},
		{"allowance saturates", Policy{LoadFactor: 1, Allowance: math.MaxInt, MinDepth: 4}, loads(1), math.MaxInt},
		{"never negative", Policy{LoadFactor: 1, Allowance: -5, MinDepth: 4}, loads(0), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Bound(tt.cands); got != tt.want {
				t.Errorf("%+v.Bound(%v) = %d, want %d", tt.p, tt.cands, got, tt.want)
			}
		})
	}
}

func TestColdBound(t *testing.T) {
	tests := []struct {
		name  string
		p     Policy
		cands []Candidate
		want  int
	}{
		{"off", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4}, loads(1, 2, 3, 4), 0},
		{"no candidates", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: 1}, nil, 0},
		// ceil(1 * 11 / 4) = 3, no allowance
		{"mean rounded up", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: 1}, loads(1, 2, 3, 4), 3},
		// ceil(1 * 1 / 8) = 1: every idle candidate is within it.
		{"idle fleet", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: 1}, loads(0, 0, 0, 0, 0, 0, 0, 0), 1},
		// ceil(1.25 * 11 / 4) = 4
		{"factor", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: 1.25}, loads(1, 2, 3, 4), 4},
		// never above the bound: min(ceil(1.5 * 11 / 4) + 0, ceil(2 * 11 / 4))
		{"capped by the bound", Policy{LoadFactor: 1.5, MinDepth: 4, ColdLoadFactor: 2}, loads(1, 2, 3, 4), 5},
		// Invalid policies stay defined.
		{"negative factor", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: -1}, loads(7, 7), 0},
		{"NaN factor", Policy{LoadFactor: 1.25, Allowance: 16, MinDepth: 4, ColdLoadFactor: math.NaN()}, loads(7, 7), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.ColdBound(tt.cands); got != tt.want {
				t.Errorf("%+v.ColdBound(%v) = %d, want %d", tt.p, tt.cands, got, tt.want)
			}
		})
	}
}
