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
		{"defaults", Policy{DefaultLoadFactor, DefaultAllowance, DefaultMinDepth, 0}, ""},
		{"smallest valid", Policy{LoadFactor: 1, Allowance: 0, MinDepth: 1}, ""},
		{"zero value", Policy{}, "load_factor must be at least 1, got 0"},
		{"load factor below 1", Policy{0.5, 16, 4, 0}, "load_factor must be at least 1, got 0.5"},
		{"load factor NaN", Policy{math.NaN(), 16, 4, 0}, "load_factor must be at least 1, got NaN"},
		{"load factor infinite", Policy{math.Inf(1), 16, 4, 0}, "load_factor must be finite, got +Inf"},
		{"negative allowance", Policy{1.25, -1, 4, 0}, "allowance must be at least 0, got -1"},
		{"zero min depth", Policy{1.25, 16, 0, 0}, "min_depth must be at least 1, got 0"},
		{"negative min depth", Policy{1.25, 16, -3, 0}, "min_depth must be at least 1, got -3"},
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

func TestBound(t *testing.T) {
	loads := func(ls ...int) []Candidate {
		cs := make([]Candidate, len(ls))
		for i, l := range ls {
			cs[i] = Candidate{Key: uint64(i), Load: l}
		}
		return cs
	}
	tests := []struct {
		name  string
		p     Policy
		cands []Candidate
		want  int
	}{
		{"no candidates", Policy{1.25, 16, 4, 0}, nil, 0},
		// ceil(1.25 * 11 / 4) = ceil(3.4375)
		{"bounded loads capacity", Policy{1.25, 0, 4, 0}, loads(1, 2, 3, 4), 4},
		{"allowance is added", Policy{1.25, 16, 4, 0}, loads(1, 2, 3, 4), 20},
		// ceil(1.25 * 1 / 8): the incoming request counts.
		{"idle fleet", Policy{1.25, 0, 4, 0}, loads(0, 0, 0, 0, 0, 0, 0, 0), 1},
		{"exact quotient", Policy{1, 0, 4, 0}, loads(2, 2), 3},
		{"factor 2", Policy{2, 0, 4, 0}, loads(3, 0, 0), 3},
		{"single candidate", Policy{1.25, 0, 4, 0}, loads(100), 127},
		// Invalid policies stay defined.
		{"zero factor", Policy{0, 5, 4, 0}, loads(7, 7), 5},
		{"NaN factor", Policy{math.NaN(), 5, 4, 0}, loads(7, 7), 5},
		{"negative factor", Policy{-1, 0, 4, 0}, loads(7, 7), 0},
		{"infinite factor", Policy{math.Inf(1), 0, 4, 0}, loads(1), math.MaxInt32},
		{"allowance saturates", Policy{1, math.MaxInt, 4, 0}, loads(1), math.MaxInt},
		{"never negative", Policy{1, -5, 4, 0}, loads(0), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Bound(tt.cands); got != tt.want {
				t.Errorf("%+v.Bound(%v) = %d, want %d", tt.p, tt.cands, got, tt.want)
			}
		})
	}
}
