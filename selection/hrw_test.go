package selection

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestScoreGolden pins the rendezvous score: instances running different
// score functions disagree on every cold placement.
func TestScoreGolden(t *testing.T) {
	tests := []struct {
		placement, key, want uint64
	}{
		// The first output of SplitMix64 seeded with 0 (the published
		// reference sequence): the finalizer of the golden gamma.
		{0x9e3779b97f4a7c15, 0, 0xe220a8397b1dcdaf},
		{0, 0, 0},
		{0, 1, 0xd820b7e910b0f93f},
		{1, 0, 0x5692161d100b05e5},
		{0x5eed, 0xcbf29ce484222325, 0xfcbc8b7ba1115618},
		{0xffffffffffffffff, 0x0123456789abcdef, 0xe369a1e9a9730f9f},
	}
	for _, tt := range tests {
		if got := score(tt.placement, tt.key); got != tt.want {
			t.Errorf("score(%#x, %#x) = %#x, want %#x", tt.placement, tt.key, got, tt.want)
		}
	}
}

// coldWinners returns, for each of m placement keys, the index Choose picks
// among idle candidates with the given keys (a cold request).
func coldWinners(keys []uint64, placements []uint64) []int {
	p := Policy{LoadFactor: DefaultLoadFactor, MinDepth: DefaultMinDepth}
	cands := make([]Candidate, len(keys))
	for i, k := range keys {
		cands[i] = Candidate{Key: k}
	}
	w := make([]int, len(placements))
	for j, pl := range placements {
		ch := p.Choose(cands, pl, 0)
		if ch.Reason != ReasonCold {
			panic(fmt.Sprintf("Choose(idle, %#x) = %+v, want reason cold", pl, ch))
		}
		w[j] = ch.Index
	}
	return w
}

func randomPlacements(m int, seed uint64) []uint64 {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	ps := make([]uint64, m)
	for i := range ps {
		ps[i] = rng.Uint64()
	}
	return ps
}

func sequentialPlacements(m int) []uint64 {
	ps := make([]uint64, m)
	for i := range ps {
		ps[i] = uint64(i)
	}
	return ps
}

// checkUniform reports whether counts, of m draws, are each within 5
// standard deviations of m/len(counts). Generous, so a fixed seed does not
// fail by bad luck, yet a 10% bias at these sizes fails.
func checkUniform(counts []int, m int) error {
	p := 1 / float64(len(counts))
	mean := float64(m) * p
	tol := 5 * math.Sqrt(float64(m)*p*(1-p))
	for i, c := range counts {
		if math.Abs(float64(c)-mean) > tol {
			return fmt.Errorf("candidate %d of %d won %d of %d, want %.0f ± %.0f", i, len(counts), c, m, mean, tol)
		}
	}
	return nil
}

// checkShare reports whether c of m draws is within 5 standard deviations
// of a 1/n share.
func checkShare(c, m, n int) error {
	p := 1 / float64(n)
	mean := float64(m) * p
	if tol := 5 * math.Sqrt(float64(m)*p*(1-p)); math.Abs(float64(c)-mean) > tol {
		return fmt.Errorf("%d of %d placements moved, want %.0f ± %.0f", c, m, mean, tol)
	}
	return nil
}

func TestCheckUniform(t *testing.T) {
	tests := []struct {
		counts []int
		ok     bool
	}{
		{[]int{10100, 9900}, true},
		{[]int{10500, 9500}, false},
		{[]int{3000, 3000, 3000, 3000, 3000, 3000, 3000, 3000}, true},
		{[]int{3300, 3000, 3000, 3000, 3000, 3000, 3000, 2700}, false},
	}
	for _, tt := range tests {
		m := 0
		for _, c := range tt.counts {
			m += c
		}
		if err := checkUniform(tt.counts, m); (err == nil) != tt.ok {
			t.Errorf("checkUniform(%v, %d) = %v, want ok %v", tt.counts, m, err, tt.ok)
		}
	}
}

// TestHRWUniform: over many placement keys, each of n idle candidates wins
// a cold request about 1/n of the time, for hashed and for sequential
// placement keys.
func TestHRWUniform(t *testing.T) {
	const m = 24000
	for _, n := range []int{2, 3, 5, 8, 16} {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = dialKey(i)
		}
		for _, pl := range []struct {
			name string
			ps   []uint64
		}{
			{"random", randomPlacements(m, uint64(n))},
			{"sequential", sequentialPlacements(m)},
		} {
			t.Run(fmt.Sprintf("n=%d/%s", n, pl.name), func(t *testing.T) {
				counts := make([]int, n)
				for _, w := range coldWinners(keys, pl.ps) {
					counts[w]++
				}
				if err := checkUniform(counts, m); err != nil {
					t.Errorf("Choose(%d idle candidates, %d %s placements): %v", n, m, pl.name, err)
				}
			})
		}
	}
}

// TestHRWSpreadsEqualHolders: requests that equally deep holders match
// spread uniformly over those holders, and never go to non-holders.
func TestHRWSpreadsEqualHolders(t *testing.T) {
	const m = 24000
	p := Policy{LoadFactor: DefaultLoadFactor, Allowance: DefaultAllowance, MinDepth: DefaultMinDepth}
	cands := make([]Candidate, 6)
	for i := range cands {
		cands[i] = Candidate{Key: dialKey(i)}
		if i%2 == 1 {
			cands[i].Depth = 7
		}
	}
	counts := make([]int, len(cands))
	for _, pl := range randomPlacements(m, 42) {
		counts[p.Choose(cands, pl, 0).Index]++
	}
	if counts[0]+counts[2]+counts[4] != 0 {
		t.Fatalf("Choose(3 holders, 3 non-holders) chose non-holders %d times, want 0 (counts %v)",
			counts[0]+counts[2]+counts[4], counts)
	}
	if err := checkUniform([]int{counts[1], counts[3], counts[5]}, m); err != nil {
		t.Errorf("Choose(3 equally deep holders, %d placements): %v", m, err)
	}
}

// TestHRWRendezvous: removing a candidate moves only the placements it won;
// adding one moves placements only to it.
func TestHRWRendezvous(t *testing.T) {
	const n, m = 10, 20000
	keys := make([]uint64, n+1)
	for i := range keys {
		keys[i] = dialKey(i)
	}
	ps := randomPlacements(m, 7)
	before := coldWinners(keys[:n], ps)

	for r := range n {
		t.Run(fmt.Sprintf("remove %d", r), func(t *testing.T) {
			rest := append(append([]uint64(nil), keys[:r]...), keys[r+1:n]...)
			after := coldWinners(rest, ps)
			moved, owned := 0, 0
			for j, pl := range ps {
				was, now := keys[before[j]], rest[after[j]]
				if was == keys[r] {
					owned++
					continue
				}
				if was != now {
					moved++
					if moved <= 3 {
						t.Errorf("placement %#x moved from %#x to %#x when %#x was removed", pl, was, now, keys[r])
					}
				}
			}
			if moved > 0 {
				t.Errorf("removing candidate %d moved %d placements it did not own, want 0", r, moved)
			}
			// It owned about 1/n of them, and exactly those moved.
			if err := checkShare(owned, m, n); err != nil {
				t.Errorf("removing candidate %d of %d: %v", r, n, err)
			}
		})
	}
	t.Run("add", func(t *testing.T) {
		after := coldWinners(keys, ps)
		gained := 0
		for j, pl := range ps {
			if after[j] == n {
				gained++
			} else if after[j] != before[j] {
				t.Fatalf("placement %#x moved from %d to %d when candidate %d was added", pl, before[j], after[j], n)
			}
		}
		if err := checkShare(gained, m, n+1); err != nil {
			t.Errorf("adding candidate %d: %v", n, err)
		}
	})
}
