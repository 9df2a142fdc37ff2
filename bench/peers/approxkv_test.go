package peers

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDynamoBlocks(t *testing.T) {
	text := []byte(strings.Repeat("abcdefgh", 20)) // 160 bytes
	tests := []struct {
		name      string
		len       int
		wantAll   int
		wantFull  int
		sameAsAll int // leading hashes equal to the whole text's
	}{
		{"empty", 0, 0, 0, 0},
		{"partial only", 10, 1, 0, 0},
		{"one full block", 64, 1, 1, 1},
		{"full and partial", 100, 2, 1, 1},
		{"two full, partial", 160, 3, 2, 3},
	}
	all, _ := dynamoBlocks("m", text, 64)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hashes, full := dynamoBlocks("m", text[:tt.len], 64)
			if len(hashes) != tt.wantAll || full != tt.wantFull {
				t.Fatalf("dynamoBlocks(%d bytes) = %d hashes, %d full, want %d, %d", tt.len, len(hashes), full, tt.wantAll, tt.wantFull)
			}
			if !slices.Equal(hashes[:tt.sameAsAll], all[:tt.sameAsAll]) {
				t.Errorf("dynamoBlocks(%d bytes) full blocks %x are not a prefix of %x", tt.len, hashes[:full], all)
			}
		})
	}
	a, _ := dynamoBlocks("m", text[:100], 64)
	b, _ := dynamoBlocks("m", text[:110], 64)
	if a[1] == b[1] {
		t.Errorf("two different partial tails hash alike: %x", a[1])
	}
}

func TestApproxIndexer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	x := newApproxIndexer(2 * time.Minute)
	x.record([]uint64{1, 2, 3}, 0, t0)
	x.record([]uint64{1, 2}, 1, t0.Add(time.Minute))
	tests := []struct {
		name   string
		hashes []uint64
		worker int
		at     time.Duration
		want   int
	}{
		{"full", []uint64{1, 2, 3, 4}, 0, 0, 3},
		{"leading run only", []uint64{1, 9, 3}, 0, 0, 1},
		{"other worker", []uint64{1, 2, 3}, 1, time.Minute, 2},
		{"unknown worker", []uint64{1}, 7, 0, 0},
		{"expired after the ttl", []uint64{1, 2, 3}, 0, 2 * time.Minute, 0},
		{"just before the ttl", []uint64{1, 2, 3}, 0, 2*time.Minute - 1, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := x.overlap(tt.hashes, tt.worker, t0.Add(tt.at)); got != tt.want {
				t.Errorf("overlap(%v, worker %d, t0+%v) = %d, want %d", tt.hashes, tt.worker, tt.at, got, tt.want)
			}
		})
	}
	// Routing again refreshes the ttl; a later record sweeps what expired.
	x.record([]uint64{1}, 0, t0.Add(time.Minute))
	x.record([]uint64{8}, 2, t0.Add(150*time.Second))
	if got := x.overlap([]uint64{1, 2}, 0, t0.Add(150*time.Second)); got != 1 {
		t.Errorf("after a refresh of block 1 only, overlap = %d, want 1", got)
	}
	if _, ok := x.expiry[0][2]; ok {
		t.Errorf("an expired block survived the sweep")
	}
}

func TestActiveBlocks(t *testing.T) {
	a := newActiveBlocks()
	a.add(0, []uint64{1, 2, 3})
	a.add(0, []uint64{1, 2, 4}) // shares two blocks
	tests := []struct {
		name       string
		worker     int
		hashes     []uint64
		wantActive int
		wantAdded  int
	}{
		{"distinct blocks counted once", 0, []uint64{1, 2, 5}, 4, 1},
		{"idle worker", 1, []uint64{1, 2}, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			active, added := a.count(tt.worker, tt.hashes)
			if active != tt.wantActive || added != tt.wantAdded {
				t.Errorf("count(%d, %v) = %d, %d, want %d, %d", tt.worker, tt.hashes, active, added, tt.wantActive, tt.wantAdded)
			}
		})
	}
	a.remove(0, []uint64{1, 2, 3})
	if active, _ := a.count(0, nil); active != 3 {
		t.Errorf("after removing one request, %d active blocks, want 3 (1, 2, 4)", active)
	}
	a.remove(0, []uint64{1, 2, 4})
	if active, _ := a.count(0, nil); active != 0 {
		t.Errorf("after removing both, %d active blocks, want 0", active)
	}
}

func TestDynamoCost(t *testing.T) {
	tests := []struct {
		name                                   string
		weight                                 float64
		textLen, block, overlap, active, added int
		want                                   float64
	}{
		{"cold idle worker", 1, 640, 64, 0, 0, 10, 20},
		{"full overlap", 1, 640, 64, 10, 0, 10, 10},
		{"partial tail stays prefill", 1, 660, 64, 10, 0, 11, 11 + 20.0/64},
		{"busy warm worker", 1, 640, 64, 10, 30, 0, 30},
		{"weight 0 is load only", 0, 640, 64, 0, 5, 10, 15},
		{"weight 2", 2, 640, 64, 5, 0, 5, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dynamoCost(tt.weight, tt.textLen, tt.block, tt.overlap, tt.active, tt.added); got != tt.want {
				t.Errorf("dynamoCost(%v, %d, %d, %d, %d, %d) = %v, want %v", tt.weight, tt.textLen, tt.block, tt.overlap, tt.active, tt.added, got, tt.want)
			}
		})
	}
}

func TestArgmin(t *testing.T) {
	costs := []float64{3, 1, 2, 1}
	if got := argmin(costs, func(int) int { return 0 }); got != 3 {
		t.Errorf("argmin(%v, always replace) = %d, want 3", costs, got)
	}
	if got := argmin(costs, func(n int) int { return n - 1 }); got != 1 {
		t.Errorf("argmin(%v, never replace) = %d, want 1", costs, got)
	}
}
