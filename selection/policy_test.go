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
		{"defaults", Policy{DefaultLoadFactor, DefaultAllowance, DefaultMinDepth, 0, 0}, ""},
		{"smallest valid", Policy{LoadFactor: 1, Allowance: 0, MinDepth: 1}, ""},
		{"zero value", Policy{}, "load_factor must be at least 1, got 0"},
		{"load factor below 1", Policy{0.5, 16, 4, 0, 0}, "load_factor must be at least 1, got 0.5"},
		{"load factor NaN", Policy{math.NaN(), 16, 4, 0, 0}, "load_factor must be at least 1, got NaN"},
		{"load factor infinite", Policy{math.Inf(1), 16, 4, 0, 0}, "load_factor must be finite, got +Inf"},
		{"negative allowance", Policy{1.25, -1, 4, 0, 0}, "allowance must be at least 0, got -1"},
		{"zero min depth", Policy{1.25, 16, 0, 0, 0}, "min_depth must be at least 1, got 0"},
		{"negative min depth", Policy{1.25, 16, -3, 0, 0}, "min_depth must be at least 1, got -3"},
		{"default cold load factor", Policy{1.25, 16, 4, 0, DefaultColdLoadFactor}, ""},
		{"cold load factor equal to load factor", Policy{1.5, 16, 4, 0, 1.5}, ""},
		{"cold load factor below 1", Policy{1.25, 16, 4, 0, 0.5}, "cold_load_factor must be 0 (off) or between 1 and load_factor (1.25), got 0.5"},
		{"cold load factor above load factor", Policy{1.25, 16, 4, 0, 2}, "cold_load_factor must be 0 (off) or between 1 and load_factor (1.25), got 2"},
		{"cold load factor NaN", Policy{1.25, 16, 4, 0, math.NaN()}, "cold_load_factor must be 0 (off) or between 1 and load_factor (1.25), got NaN"},
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
		{"no candidates", Policy{1.25, 16, 4, 0, 0}, nil, 0},
		// ceil(1.25 * 11 / 4) = ceil(3.4375)
		{"bounded loads capacity", Policy{1.25, 0, 4, 0, 0}, loads(1, 2, 3, 4), 4},
		{"allowance is added", Policy{1.25, 16, 4, 0, 0}, loads(1, 2, 3, 4), 20},
		// ceil(1.25 * 1 / 8): the incoming request counts.
		{"idle fleet", Policy{1.25, 0, 4, 0, 0}, loads(0, 0, 0, 0, 0, 0, 0, 0), 1},
		{"exact quotient", Policy{1, 0, 4, 0, 0}, loads(2, 2), 3},
		{"factor 2", Policy{2, 0, 4, 0, 0}, loads(3, 0, 0), 3},
		{"single candidate", Policy{1.25, 0, 4, 0, 0}, loads(100), 127},
		// Invalid policies stay defined.
		{"zero factor", Policy{0, 5, 4, 0, 0}, loads(7, 7), 5},
		{"NaN factor", Policy{math.NaN(), 5, 4, 0, 0}, loads(7, 7), 5},
		{"negative factor", Policy{-1, 0, 4, 0, 0}, loads(7, 7), 0},
		{"infinite factor", Policy{math.Inf(1), 0, 4, 0, 0}, loads(1), math.MaxInt32},
		{"allowance saturates", Policy{1, math.MaxInt, 4, 0, 0}, loads(1), math.MaxInt},
		{"never negative", Policy{1, -5, 4, 0, 0}, loads(0), 0},
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
		{"off", Policy{1.25, 16, 4, 0, 0}, loads(1, 2, 3, 4), 0},
		{"no candidates", Policy{1.25, 16, 4, 0, 1}, nil, 0},
		// ceil(1 * 11 / 4) = 3, no allowance
		{"mean rounded up", Policy{1.25, 16, 4, 0, 1}, loads(1, 2, 3, 4), 3},
		// ceil(1 * 1 / 8) = 1: every idle candidate is within it.
		{"idle fleet", Policy{1.25, 16, 4, 0, 1}, loads(0, 0, 0, 0, 0, 0, 0, 0), 1},
		// ceil(1.25 * 11 / 4) = 4
		{"factor", Policy{1.25, 16, 4, 0, 1.25}, loads(1, 2, 3, 4), 4},
		// never above the bound: min(ceil(1.5 * 11 / 4) + 0, ceil(2 * 11 / 4))
		{"capped by the bound", Policy{1.5, 0, 4, 0, 2}, loads(1, 2, 3, 4), 5},
		// Invalid policies stay defined.
		{"negative factor", Policy{1.25, 16, 4, 0, -1}, loads(7, 7), 0},
		{"NaN factor", Policy{1.25, 16, 4, 0, math.NaN()}, loads(7, 7), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.ColdBound(tt.cands); got != tt.want {
				t.Errorf("%+v.ColdBound(%v) = %d, want %d", tt.p, tt.cands, got, tt.want)
			}
		})
	}
}
