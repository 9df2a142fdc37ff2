package fleet

import (
	"sync"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// With engine_metrics' capacity on, the index models each engine's KV
// cache as an LRU (prefixindex.SetCapacity) of the size the engine
// publishes, and the engines' answers (prefix_cache_usage) correct it:
// an engine that had far less cached than the index predicted, for a
// prefix last sent to it some chunks ago, evidently holds fewer than
// that many; one that had what was predicted holds at least that many.
// The capacity the index applies is the smaller of the two, so an engine
// whose cache is shared with other clients, or pinned by its running
// requests, or smaller than it says, is believed to hold what its answers
// show.

const (
	// minEvidenceChunks is the least age, in chunks sent to an engine,
	// at which a miss counts as an eviction: a younger prefix may still
	// be in the engine's prefill queue, sent by a request in flight or
	// by another edge a moment ago, and a miss there says nothing of the
	// engine's capacity. 256 chunks are 64 KiB of text, ~16k tokens,
	// far below any engine's cache.
	minEvidenceChunks = 256
	// learnedGrowth is how much a learned capacity grows, as a share of
	// itself, with each answer as predicted at an age near it, so that
	// a capacity learned too small (an engine that freed memory, a run
	// of unlucky misses) is found again.
	learnedGrowth = 1.0 / 64
)

// Capacity is what one engine's KV capacity is believed to be, in chunks
// of routing text; 0 is unknown.
type Capacity struct {
	// Published is the capacity its metrics publish.
	Published int
	// Learned is the capacity its answers show.
	Learned int
	// Misses and Hits are the answers taken as evidence: misses old
	// enough to be evictions, and answers as predicted near Learned.
	Misses, Hits uint64
}

// Effective is the capacity the index applies: the smaller of the known
// ones, 0 when neither is known.
func (e *Capacity) Effective() int {
	switch {
	case e.Published == 0:
		return e.Learned
	case e.Learned == 0:
		return e.Published
	}
	return min(e.Published, e.Learned)
}

// PublishCapacity records the capacity, in chunks, that id's engine
// publishes, and applies it to ix, the Fleet's index.
func (f *Fleet) PublishCapacity(ix *prefixindex.Index, id prefixindex.ID, chunks int) {
	f.capacities.published(ix, id, chunks)
}

// LearnCapacity learns from one answer of id's engine about a prefix
// last sent to it age chunks before, which compared with its prediction
// as o, and applies what it learned to ix, the Fleet's index.
func (f *Fleet) LearnCapacity(ix *prefixindex.Index, id prefixindex.ID, age uint32, o Outcome) {
	f.capacities.answered(ix, id, age, o)
}

// Capacity returns what id's engine's capacity is believed to be, and
// whether anything is known of it.
func (f *Fleet) Capacity(id prefixindex.ID) (Capacity, bool) { return f.capacities.get(id) }

// ResetCapacities forgets every engine's capacity (the caller lifts the
// index's), when no reader uses capacities any more.
func (f *Fleet) ResetCapacities() { f.capacities.reset() }

// capacityLearner is, per upstream ID, its engine's capacity.
type capacityLearner struct {
	mu sync.Mutex
	by map[prefixindex.ID]*Capacity
}

// entry returns id's record, creating it. l.mu must be held.
func (l *capacityLearner) entry(id prefixindex.ID) *Capacity {
	if l.by == nil {
		l.by = map[prefixindex.ID]*Capacity{}
	}
	e := l.by[id]
	if e == nil {
		e = &Capacity{}
		l.by[id] = e
	}
	return e
}

// published records the capacity id's engine publishes and applies it.
func (l *capacityLearner) published(ix *prefixindex.Index, id prefixindex.ID, chunks int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(id)
	e.Published = chunks
	ix.SetCapacity(id, e.Effective())
}

// answered learns from one answer of id's engine about a prefix last
// sent to it age chunks before, and applies what it learned.
func (l *capacityLearner) answered(ix *prefixindex.Index, id prefixindex.ID, age uint32, o Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(id)
	a := int(min(age, prefixindex.MaxCapacity))
	switch {
	case o == LessCached && a >= minEvidenceChunks:
		// Evicted at age a: it holds fewer.
		e.Misses++
		if e.Learned == 0 || a < e.Learned {
			e.Learned = a
		}
	case o == AsPredicted && e.Learned != 0 && 2*a >= e.Learned:
		// Held at age a: it holds at least that many, and perhaps more.
		e.Hits++
		e.Learned = max(e.Learned, a) + max(1, int(float64(e.Learned)*learnedGrowth))
		if e.Published != 0 {
			e.Learned = min(e.Learned, e.Published)
		}
	default:
		return
	}
	ix.SetCapacity(id, e.Effective())
}

// get returns a copy of id's record, and whether it has one.
func (l *capacityLearner) get(id prefixindex.ID) (Capacity, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.by[id]
	if e == nil {
		return Capacity{}, false
	}
	return *e, true
}

// forget drops id's record.
func (l *capacityLearner) forget(id prefixindex.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.by, id)
}

// reset drops every record.
func (l *capacityLearner) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.by = nil
}
