package fleet

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/prefixcache/caddy-prefixcache/enginemetrics"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// Engine is the latest good scrape of one upstream's engine.
type Engine struct {
	enginemetrics.Sample
	// Upstream is the upstream scraped: an ID may be reused by another.
	Upstream string
	// At is when the scrape's answer arrived, in unix nanoseconds.
	At int64
	// Others is the requests the engine had beyond this edge's in flight
	// to it at the scrape: other edges' and other clients'.
	Others int
	// Prefill is the engine's measured prefill speed.
	Prefill enginemetrics.PrefillMeter
}

// engineTable holds, per upstream ID, its latest sample. A Fleet
// allocates it at the first scrape.
type engineTable struct {
	samples [prefixindex.MaxIDs + 1]atomic.Pointer[Engine]
}

// Scraped records a good scrape of id, the upstream named upstream,
// whose answer arrived at now (unix nanoseconds), when own of this
// edge's requests were in flight to it. The engine's prefill meter
// carries on from the previous sample of the same upstream.
func (f *Fleet) Scraped(id prefixindex.ID, upstream string, now int64, s enginemetrics.Sample, own int) {
	t := f.engineTable()
	e := &Engine{Sample: s, Upstream: upstream, At: now}
	if q := s.Queue(); q >= 0 {
		e.Others = max(0, int(math.Round(q))-own)
	}
	if prev := t.samples[id].Load(); prev != nil && prev.Upstream == upstream {
		e.Prefill = prev.Prefill
	}
	e.Prefill = e.Prefill.Next(s)
	t.samples[id].Store(e)
}

// Engine returns the latest sample of id's engine, if it is of the
// upstream named upstream, fresh or not.
func (f *Fleet) Engine(id prefixindex.ID, upstream string) (*Engine, bool) {
	t := f.engines.Load()
	if t == nil {
		return nil, false
	}
	e := t.samples[id].Load()
	if e == nil || e.Upstream != upstream {
		return nil, false
	}
	return e, true
}

// engineTable returns f's table, creating it.
func (f *Fleet) engineTable() *engineTable {
	if t := f.engines.Load(); t != nil {
		return t
	}
	f.engines.CompareAndSwap(nil, new(engineTable))
	return f.engines.Load()
}

// fresh returns id's sample of upstream if it is no older than stale at
// now.
func (f *Fleet) fresh(id prefixindex.ID, upstream string, now int64, stale time.Duration) *Engine {
	t := f.engines.Load() // nil until the first scrape
	if t == nil {
		return nil
	}
	e := t.samples[id].Load()
	if e == nil || e.Upstream != upstream || now-e.At > int64(stale) {
		return nil
	}
	return e
}
