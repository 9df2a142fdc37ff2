package fleet

import (
	"sync/atomic"
	"time"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// Fleet is what one edge knows of the upstreams of one index. Its zero
// value is ready to use; it must not be copied after first use.
type Fleet struct {
	// bytes and uncached are each upstream's routing text in flight,
	// and the part of it the upstream was not believed to hold.
	bytes    inflightBytes
	uncached inflightBytes
	// queues are the upstreams' estimated prefill queues; sent counts
	// the uncached text placed at each, for the load reports.
	queues prefillQueues
	sent   sentCounters
	// tier is the other edges' load.
	tier tierLoad
	// engines is the latest scrape of each upstream's engine; nil until
	// the first.
	engines atomic.Pointer[engineTable]
	// answers is what the engines answered about their caches, and
	// capacities each engine's capacity, as published and as its
	// answers show it.
	answers    answerTable
	capacities capacityLearner
}

// Options is how one reader (a policy instance) reads and feeds the
// fleet: instances sharing an index share its Fleet, each with its own
// configuration. The zero Options reads this edge's bytes in flight
// alone.
type Options struct {
	// NsPerByte is the configured prefill speed, in nanoseconds per byte
	// of routing text; 0 turns the prefill queue off.
	NsPerByte float64
	// Tier counts the other edges' reports (Report).
	Tier bool
	// EngineQueue counts, in RemoteRequests, what each engine runs and
	// queues beyond this edge's requests, by its fresh samples.
	EngineQueue bool
	// EnginePrefill drains each queue at its engine's measured speed
	// while its samples are fresh, at NsPerByte otherwise.
	EnginePrefill bool
	// EngineStale is the age past which an engine's sample no longer
	// counts.
	EngineStale time.Duration
	// BytesPerToken converts an engine's tokens to bytes of routing
	// text.
	BytesPerToken float64
}

// State is what the fleet knows of one upstream at one time.
type State struct {
	// Bytes is the routing text of this edge's requests in flight at the
	// upstream; Uncached the part of it the upstream was not believed
	// to hold when each request was placed.
	Bytes, Uncached int64
	// RemoteRequests is the requests in flight there beyond this edge's:
	// the other edges' reports (with Options.Tier) or what the engine
	// runs and queues beyond this edge's requests (with
	// Options.EngineQueue), whichever is more: both count the other
	// edges, so they are never added. RemoteBytes is the other edges'
	// routing text in flight there (with Options.Tier).
	RemoteRequests int
	RemoteBytes    int64
	// Queued is the uncached prefill estimated queued at the upstream,
	// in bytes of routing text, at most the uncached bytes in flight
	// there (Uncached, plus RemoteBytes, all the other edges route, for
	// they do not report what of it is uncached): 0 with the queue off.
	Queued int64
	// NsPerByte is the speed the queue drains at, in nanoseconds per
	// byte (0 with the queue off), and Wait the nanoseconds it takes to
	// drain Queued at that speed.
	NsPerByte float64
	Wait      int64
}

// Read returns what the fleet knows of id, the upstream named upstream,
// at now (unix nanoseconds), as o reads it. It takes no lock and
// allocates nothing.
func (f *Fleet) Read(id prefixindex.ID, upstream string, now int64, o *Options) State {
	s := State{Bytes: f.bytes.load(id), Uncached: f.uncached.load(id)}
	if o.Tier {
		s.RemoteRequests, s.RemoteBytes = f.tier.load(id)
	}
	if o.EngineQueue {
		if e := f.fresh(id, upstream, now, o.EngineStale); e != nil && e.Queue() >= 0 {
			s.RemoteRequests = max(s.RemoteRequests, e.Others)
		}
	}
	if o.NsPerByte > 0 {
		s.NsPerByte = f.speed(id, upstream, now, o)
		s.Queued = min(f.queues.load(id, now, s.NsPerByte), s.Uncached+s.RemoteBytes)
		s.Wait = int64(float64(s.Queued) * s.NsPerByte)
	}
	return s
}

// speed is the nanoseconds per byte of routing text id, the upstream
// named upstream, prefills at, at now: its engine's measured speed with
// o.EnginePrefill while its samples are fresh, else o.NsPerByte.
func (f *Fleet) speed(id prefixindex.ID, upstream string, now int64, o *Options) float64 {
	if o.EnginePrefill {
		if e := f.fresh(id, upstream, now, o.EngineStale); e != nil && e.Prefill.Rate() > 0 {
			return 1e9 / (e.Prefill.Rate() * o.BytesPerToken)
		}
	}
	return o.NsPerByte
}

// Reported returns the requests and bytes of routing text the other
// edges' fresh reports have in flight at id.
func (f *Fleet) Reported(id prefixindex.ID) (int, int64) { return f.tier.load(id) }

// Sent returns the uncached routing text placed at id since the fleet
// was made: what this edge's load reports carry. It only grows.
func (f *Fleet) Sent(id prefixindex.ID) uint64 { return f.sent[id].Load() }

// Forget drops what the engines' answers said of id and its engine's
// capacity, when the index forgets id: another upstream may get its ID.
// (Bytes in flight stay until their requests settle; samples and
// reports name their upstream.)
func (f *Fleet) Forget(id prefixindex.ID) {
	f.answers.forget(id)
	f.capacities.forget(id)
}
