package prefixindex

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrent hammers one index with every operation from several
// goroutines; run it under -race. Afterwards the structure must be intact.
func TestConcurrent(t *testing.T) {
	ix := newIndex(t, Config{MaxEntries: 3000, Shards: 8})
	ix.maxIDs = 12 // force ID reuse
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("10.0.0.%d:8000", i)
	}
	families := make([][]Hash, 50)
	for i := range families {
		families[i] = hashes(fmt.Sprint("fam", i), 200)
	}
	iters := 2000
	if raceEnabled || testing.Short() {
		iters = 500
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			ids := make([]ID, 4)
			depths := make([]int, 4)
			for range iters {
				hs := families[r.IntN(len(families))]
				hs = hs[:r.IntN(len(hs)+1)]
				switch op := r.IntN(1000); {
				case op < 5:
					ix.Forget(names[r.IntN(len(names))])
				case op < 7:
					ix.Flush()
				case op < 20:
					if st := ix.Stats(); st.Entries > st.Capacity {
						t.Errorf("Stats().Entries = %d > Capacity %d", st.Entries, st.Capacity)
					}
				case op < 500:
					if id, err := ix.Intern(names[r.IntN(len(names))]); err == nil {
						ix.Record(Scope{}, hs, id)
					} else {
						t.Errorf("Intern: %v", err)
					}
				default:
					for j := range ids {
						ids[j], _ = ix.Intern(names[r.IntN(len(names))])
					}
					ix.Depths(Scope{}, hs, ids, depths)
					for j, d := range depths {
						if d < 0 || d > len(hs) {
							t.Errorf("Depths(hs[%d], %v)[%d] = %d, out of range", len(hs), ids, j, d)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, ix)
}

// TestForgetDuringRecord checks that once Forget returns, no entry names the
// forgotten ID, even while Records for it are still running.
func TestForgetDuringRecord(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			ix := newIndex(t, Config{MaxEntries: 20000, Shards: 8})
			a := intern(t, ix, "A")
			intern(t, ix, "B")
			var stop atomic.Bool
			var wg sync.WaitGroup
			for w := range 3 {
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						ix.Record(Scope{}, hashes(fmt.Sprint(w, i%50), 64), a)
					}
				})
			}
			ix.Record(Scope{}, hashes("warm", 64), a)
			ix.Forget("A")
			if n := countOwned(ix, a); n != 0 {
				t.Errorf("right after Forget(A): %d entries still owned by A's ID %d", n, a)
			}
			stop.Store(true)
			wg.Wait()
			if n := countOwned(ix, a); n != 0 {
				t.Errorf("after Forget(A) and the recorders stopped: %d entries owned by A's ID %d", n, a)
			}
			checkInvariants(t, ix)
		})
	}
}

func countOwned(ix *Index, id ID) int {
	n := 0
	for i := range ix.shards {
		s := &ix.shards[i]
		s.mu.Lock()
		for idx := 1; idx < len(s.entries); idx++ {
			if o := s.entries[idx].owners; o != 0 && holds(o, id) {
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}
