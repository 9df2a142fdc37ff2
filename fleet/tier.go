package fleet

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// The other edges of a tier report their load: what each has in flight
// at each upstream (requests and bytes of routing text), and the
// uncached text it has sent each so far. An edge adds what the others
// report to its own counts, so that a load bound holds for the whole
// tier, and what they sent since their previous report to its prefill
// queues. A report older than the TTL (its edge stopped, or the
// transport is down) does not count, so an edge without fresh reports
// reads its own load alone.

// DefaultReportTTL is how long a report counts unless SetReportTTL says
// otherwise: five of the default report interval of 100 ms, so that one
// lost report changes nothing and a gone edge stops counting within a
// second.
const DefaultReportTTL = 500 * time.Millisecond

// Bounds on what load reports can make an edge hold and add up, whatever
// a publisher on the channel sends.
const (
	// MaxOrigins is the most other edges whose reports count at once:
	// far more than any tier has, few enough that the reports' storage
	// and the sums below stay small. A report from one more edge is
	// refused until a counted edge goes quiet for the TTL.
	MaxOrigins = 256
	// MaxReportRequests and MaxReportBytes clamp one edge's reported
	// load at one upstream: a million requests, 1 TiB of routing text in
	// flight or sent since its previous report. Summed over MaxOrigins
	// edges they stay far below what an int64 holds.
	MaxReportRequests = 1 << 20
	MaxReportBytes    = 1 << 40
)

// RemoteRatio bounds what the other edges' reports count at one
// upstream, whatever they claim: at most RemoteRatio times this edge's own
// load there counting the request being placed, in requests and in bytes
// of routing text (Counted).
//
// Edges route alike (they share placements and the rendezvous key), so
// behind one balancer each upstream's load splits about evenly between
// them: the others hold about (edges - 1) times this edge's share of it,
// and 4 leaves room for a tier of five evenly loaded edges, or of three
// with one twice as busy as this one. Past that (more edges, or clients
// of one edge piling onto one upstream) the edge counts less than the
// others hold, and bounds nearer its own load, as it would without sync:
// a busy upstream takes more of its requests, it fails none.
//
// What it stops: a publisher on the channel claiming 2^20 requests at
// every upstream but one made them all look full, so every request, warm
// conversations included, went to the one it spared. Clamped, a claim
// adds at most four requests at an upstream this edge has nothing in
// flight at, which the load bound's allowance absorbs, so warm requests
// keep their homes; and as this edge's load at the spared upstream grows,
// the cold bound sends new requests to the others again. A claim scales
// with what this edge sends where it is made, so steering traffic away
// from an upstream shrinks the claim there.
const RemoteRatio = 4

// Counted returns s, which Read returned for id, the upstream named
// upstream, at now, with the other edges' reports counted at most
// RemoteRatio times this edge's load there with the request being
// placed: own requests in flight there (Caddy counts them, the fleet
// does not) plus one, and s.Bytes plus promptBytes, the request's
// routing text. The engine's own count (Options.EngineQueue) is not
// clamped: the engine is trusted. The prefill queue stays at most the
// uncached bytes in flight there, the other edges' as counted; where
// the request holds a prefix (holds), the other edges' count at most
// RemoteRatio times this edge's own uncached bytes there, without the
// request's: a queue weighed against a cached prefix moves a warm
// request off its cache, and a claim of a few prompts at an upstream
// this edge has nothing in flight at would move every conversation
// living there (TestForgedLoadCannotSteerTheTier). A cold request loses
// no cache by moving, so it keeps the whole count. It takes no lock and
// allocates nothing.
func (f *Fleet) Counted(s State, id prefixindex.ID, upstream string, now int64, own int, promptBytes int64, holds bool, o *Options) State {
	if !o.Tier {
		return s
	}
	requests, bytes := f.tier.load(id)
	s.RemoteRequests = min(requests, RemoteRatio*(max(own, 0)+1))
	s.RemoteBytes = min(bytes, RemoteRatio*(max(s.Bytes, 0)+max(promptBytes, 0)))
	if o.EngineQueue {
		if e := f.fresh(id, upstream, now, o.EngineStale); e != nil && e.Queue() >= 0 {
			s.RemoteRequests = max(s.RemoteRequests, e.Others)
		}
	}
	remote := s.RemoteBytes
	if holds {
		remote = min(remote, RemoteRatio*max(s.Uncached, 0))
	}
	if s.NsPerByte > 0 && s.Queued > s.Uncached+remote {
		s.Queued = s.Uncached + remote
		s.Wait = int64(float64(s.Queued) * s.NsPerByte)
	}
	return s
}

// Load is what one report says of one upstream, as an ID of the Fleet's
// index.
type Load struct {
	ID prefixindex.ID
	// Upstream names the upstream (its Dial): the engine's sample, and
	// so its prefill speed, counts only for the upstream it was taken of.
	Upstream string
	// Requests and Bytes are the edge's requests and bytes of routing
	// text in flight there.
	Requests, Bytes int64
	// Sent is the uncached routing text the edge has placed there so
	// far (its Fleet's Sent).
	Sent uint64
	// Grown is set by Report: how much Sent grew since the origin's
	// previous report named the upstream, at most MaxReportBytes; 0 the
	// first time, and when it went down (the edge restarted).
	Grown int64
}

// tierLoad is, per upstream ID, the other edges' load: the sum over their
// latest fresh reports.
type tierLoad struct {
	requests [prefixindex.MaxIDs + 1]atomic.Int64
	bytes    [prefixindex.MaxIDs + 1]atomic.Int64
	ttl      atomic.Int64 // how long a report counts; 0: DefaultReportTTL

	mu       sync.Mutex
	byOrigin map[uint64]*originLoad
}

// originLoad is what one other edge last reported.
type originLoad struct {
	at       time.Time
	ids      []prefixindex.ID
	requests []int64
	bytes    []int64
	// sent is each upstream's Sent as last reported, from which the
	// next report's growth is taken; prev is the map before it, kept to
	// be reused.
	sent, prev map[prefixindex.ID]uint64
}

// Report applies another edge's report, received at now: what origin
// contributed before is replaced by loads, each Load's Grown is set, and
// with the queue on (o.NsPerByte) what each upstream's Sent grew joins
// its prefill queue. It reports false, applying nothing, if MaxOrigins
// other edges count already. A report that names no upstream takes back
// what origin contributed.
func (f *Fleet) Report(origin uint64, now time.Time, loads []Load, o *Options) bool {
	if !f.tier.apply(origin, now, loads) {
		return false
	}
	if o.NsPerByte > 0 {
		ns := now.UnixNano()
		for i := range loads {
			if n := loads[i].Grown; n > 0 {
				f.queues.add(loads[i].ID, ns, n, f.speed(loads[i].ID, loads[i].Upstream, ns, o))
			}
		}
	}
	return true
}

// Expire drops the reports older than the report TTL at now.
func (f *Fleet) Expire(now time.Time) { f.tier.expire(now) }

// SetReportTTL sets how long a report counts: a few of the reporters'
// interval.
func (f *Fleet) SetReportTTL(d time.Duration) { f.tier.ttl.Store(int64(d)) }

// Edges returns how many other edges' reports count.
func (f *Fleet) Edges() int { return f.tier.edges() }

// apply replaces what origin contributed with loads, and reports false
// if it could not count it: MaxOrigins other edges count already. A
// report that names no upstream (loads is empty) takes back what origin
// contributed and keeps no entry for it. The new contribution is added
// before the old one is taken out, so that a concurrent reader sees at
// worst both, never too little load. Applying the same report twice
// grows nothing the second time.
func (t *tierLoad) apply(origin uint64, at time.Time, loads []Load) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.byOrigin[origin]
	if len(loads) == 0 {
		if o != nil {
			t.give(o)
			delete(t.byOrigin, origin)
		}
		return true
	}
	if o == nil {
		if len(t.byOrigin) >= MaxOrigins {
			return false
		}
		if t.byOrigin == nil {
			t.byOrigin = map[uint64]*originLoad{}
		}
		o = &originLoad{}
		t.byOrigin[origin] = o
	}
	for _, l := range loads {
		t.requests[l.ID].Add(min(max(l.Requests, 0), MaxReportRequests))
		t.bytes[l.ID].Add(min(max(l.Bytes, 0), MaxReportBytes))
	}
	t.give(o)
	o.at = at
	o.ids = o.ids[:0]
	o.requests = o.requests[:0]
	o.bytes = o.bytes[:0]
	for _, l := range loads {
		o.ids = append(o.ids, l.ID)
		o.requests = append(o.requests, min(max(l.Requests, 0), MaxReportRequests))
		o.bytes = append(o.bytes, min(max(l.Bytes, 0), MaxReportBytes))
	}
	o.prev, o.sent = o.sent, o.prev
	if o.sent == nil {
		o.sent = make(map[prefixindex.ID]uint64, len(loads))
	}
	clear(o.sent)
	for i := range loads {
		l := &loads[i]
		l.Grown = 0
		if prev, ok := o.prev[l.ID]; ok && l.Sent > prev {
			l.Grown = int64(min(l.Sent-prev, MaxReportBytes))
		}
		o.sent[l.ID] = l.Sent
	}
	return true
}

// expire drops the reports older than the TTL at now.
func (t *tierLoad) expire(now time.Time) {
	ttl := time.Duration(t.ttl.Load())
	if ttl == 0 {
		ttl = DefaultReportTTL
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for origin, o := range t.byOrigin {
		if now.Sub(o.at) > ttl {
			t.give(o)
			delete(t.byOrigin, origin)
		}
	}
}

// give takes o's contribution out of the sums. t.mu must be held.
func (t *tierLoad) give(o *originLoad) {
	for i, id := range o.ids {
		t.requests[id].Add(-o.requests[i])
		t.bytes[id].Add(-o.bytes[i])
	}
}

// load returns the other edges' requests and bytes in flight at id.
func (t *tierLoad) load(id prefixindex.ID) (int, int64) {
	return int(max(t.requests[id].Load(), 0)), max(t.bytes[id].Load(), 0)
}

// edges returns how many other edges' reports count.
func (t *tierLoad) edges() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byOrigin)
}
