package selection

import "testing"

func TestReasonString(t *testing.T) {
	tests := []struct {
		r    Reason
		want string
	}{
		{ReasonNone, "none"},
		{ReasonMatch, "match"},
		{ReasonSpill, "spill"},
		{ReasonSpillCold, "spill_cold"},
		{ReasonCold, "cold"},
		{ReasonColdSpill, "cold_spill"},
		{ReasonLeastLoaded, "least_loaded"},
		{numReasons, "unknown"},
		{Reason(255), "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.r.String(); got != tt.want {
				t.Errorf("Reason(%d).String() = %q, want %q", uint8(tt.r), got, tt.want)
			}
		})
	}
}

func TestReasons(t *testing.T) {
	rs := Reasons()
	if len(rs) != int(numReasons) {
		t.Fatalf("len(Reasons()) = %d, want %d", len(rs), numReasons)
	}
	seen := make(map[string]bool)
	for i, r := range rs {
		name := r.String()
		if r != Reason(i) || name == "unknown" || seen[name] {
			t.Errorf("Reasons()[%d] = %d (%q), want %d with a new name", i, r, name, i)
		}
		seen[name] = true
		for _, c := range name { // a metric label value in snake_case
			if (c < 'a' || c > 'z') && c != '_' {
				t.Errorf("Reason(%d).String() = %q, want only [a-z_]", r, name)
				break
			}
		}
	}
}
