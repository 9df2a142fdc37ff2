package fleet

import (
	"testing"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// The learner's rules: a miss old enough to be an eviction sets the
// learned capacity to its age (never raising it), one too young says
// nothing; an answer as predicted at an age near the learned capacity
// raises it past that age, never past what the engine publishes; the
// capacity applied is the smaller of the two.
func TestCapacityLearner(t *testing.T) {
	ix, err := prefixindex.New(prefixindex.Config{MaxEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := ix.Intern("10.9.2.1:8000")
	var l capacityLearner
	applied := func() int { c, _ := ix.Capacity(id); return c }

	l.answered(ix, id, 5000, AsPredicted) // nothing learned yet: no bound to raise
	if c := applied(); c != 0 {
		t.Fatalf("an answer as predicted with nothing known set capacity %d", c)
	}
	l.answered(ix, id, minEvidenceChunks-1, LessCached)
	if c := applied(); c != 0 {
		t.Errorf("a miss younger than %d chunks set capacity %d; want none", minEvidenceChunks, c)
	}
	l.answered(ix, id, 3000, LessCached)
	if c := applied(); c != 3000 {
		t.Errorf("after a miss at age 3000: capacity %d, want 3000", c)
	}
	l.answered(ix, id, 4000, LessCached) // older than the bound: says nothing new
	if c := applied(); c != 3000 {
		t.Errorf("a miss at 4000 moved the capacity to %d, want 3000", c)
	}
	l.answered(ix, id, 2900, AsPredicted)
	if c := applied(); c != 3000+3000/64 {
		t.Errorf("a hit at 2900: capacity %d, want %d (grown by a 64th)", c, 3000+3000/64)
	}
	l.answered(ix, id, 100, AsPredicted) // far below the bound: no evidence about it
	if c := applied(); c != 3000+3000/64 {
		t.Errorf("a hit at 100 moved the capacity to %d", c)
	}
	l.published(ix, id, 2000)
	if c := applied(); c != 2000 {
		t.Errorf("with 2000 published: capacity %d, want the smaller, 2000", c)
	}
	l.published(ix, id, 10000)
	for range 200 {
		l.answered(ix, id, 9999, AsPredicted)
	}
	if c := applied(); c != 10000 {
		t.Errorf("after many hits: capacity %d, want at most the published 10000", c)
	}
	e, _ := l.get(id)
	if e.Misses != 2 || e.Hits != 201 {
		t.Errorf("misses %d, hits %d; want 2 and 201 (the answers taken as evidence)", e.Misses, e.Hits)
	}
}
