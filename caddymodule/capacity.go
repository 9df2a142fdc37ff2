package caddymodule

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

// engineCapacity is what one engine's capacity is believed to be, in
// chunks of routing text; 0 is unknown.
type engineCapacity struct {
	published    int // from its metrics
	learned      int // from its answers
	misses, hits uint64
}

// effective is the capacity the index applies: the smaller of the known
// ones, 0 when neither is known.
func (e *engineCapacity) effective() int {
	switch {
	case e.published == 0:
		return e.learned
	case e.learned == 0:
		return e.published
	}
	return min(e.published, e.learned)
}

// capacityLearner is, per upstream ID of one index, its engine's
// capacity.
type capacityLearner struct {
	mu sync.Mutex
	by map[prefixindex.ID]*engineCapacity
}

// entry returns id's record, creating it. l.mu must be held.
func (l *capacityLearner) entry(id prefixindex.ID) *engineCapacity {
	if l.by == nil {
		l.by = map[prefixindex.ID]*engineCapacity{}
	}
	e := l.by[id]
	if e == nil {
		e = &engineCapacity{}
		l.by[id] = e
	}
	return e
}

// published records the capacity id's engine publishes and applies it.
func (l *capacityLearner) published(ix *prefixindex.Index, id prefixindex.ID, chunks int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(id)
	e.published = chunks
	ix.SetCapacity(id, e.effective())
}

// answered learns from one answer of id's engine about a prefix last
// sent to it age chunks before, and applies what it learned.
func (l *capacityLearner) answered(ix *prefixindex.Index, id prefixindex.ID, age uint32, o predictionOutcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(id)
	a := int(min(age, prefixindex.MaxCapacity))
	switch {
	case o == lessCached && a >= minEvidenceChunks:
		// Evicted at age a: it holds fewer.
		e.misses++
		if e.learned == 0 || a < e.learned {
			e.learned = a
		}
	case o == predictedWell && e.learned != 0 && 2*a >= e.learned:
		// Held at age a: it holds at least that many, and perhaps more.
		e.hits++
		e.learned = max(e.learned, a) + max(1, int(float64(e.learned)*learnedGrowth))
		if e.published != 0 {
			e.learned = min(e.learned, e.published)
		}
	default:
		return
	}
	ix.SetCapacity(id, e.effective())
}

// get returns a copy of id's record, and whether it has one.
func (l *capacityLearner) get(id prefixindex.ID) (engineCapacity, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.by[id]
	if e == nil {
		return engineCapacity{}, false
	}
	return *e, true
}

// forget drops id's record, when the index forgets id.
func (l *capacityLearner) forget(id prefixindex.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.by, id)
}

// reset drops every record, when capacity is turned off.
func (l *capacityLearner) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.by = nil
}
