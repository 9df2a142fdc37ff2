package caddymodule

import "testing"

// TestHeadroomOf reads GOGC as the runtime does: unset or unparsable is
// 100, off or negative turns the collector's pacing off.
func TestHeadroomOf(t *testing.T) {
	for _, tt := range []struct {
		gogc string
		want float64
	}{
		{"", 2}, {"100", 2}, {"50", 1.5}, {"400", 5}, {"0", 1},
		{"off", 1}, {"-1", 1}, {"lots", 2},
	} {
		if got := headroomOf(tt.gogc); got != tt.want {
			t.Errorf("headroomOf(%q) = %v, want %v", tt.gogc, got, tt.want)
		}
	}
}

// TestBudgetCoversHeadroom: buffers are allocated until they and the
// collector's headroom for them fill the budget, and not past it.
func TestBudgetCoversHeadroom(t *testing.T) {
	SettleBodies()
	const size = 64 << 10
	budget := int64(10 * size * gcHeadroom()) // room for ten buffers
	start := bodyAllocated.Load()
	var held [][]byte
	for range 20 {
		b := allocBody(size, budget+int64(float64(start)*gcHeadroom()))
		if b == nil {
			break
		}
		held = append(held, b)
	}
	if len(held) != 10 {
		t.Errorf("%d buffers of %d bytes fit a budget of %d with headroom %v, want 10", len(held), size, budget, gcHeadroom())
	}
	if got := bodyAllocated.Load() - start; got != int64(len(held))*size {
		t.Errorf("allocated rose by %d, want %d", got, len(held)*size)
	}
}
