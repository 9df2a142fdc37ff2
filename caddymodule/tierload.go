package caddymodule

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// With sync, the edges of a tier share their load too: each publishes what
// it has in flight at each upstream (requests and bytes of routing text)
// every loadInterval, and adds what the others report to its own counts
// before it bounds a candidate, so the load bound holds for the whole
// tier: four edges no longer admit four allowances onto one replica. A
// report older than loadTTL (its edge stopped, or the transport is down)
// no longer counts, so without sync an edge bounds by its own load alone,
// as before.

const (
	// loadInterval is how often an edge reports its load: often enough
	// that a burst on one edge is seen by the others before it has
	// admitted much of it (a request's prefill takes tens of milliseconds
	// at least), rarely enough to cost nothing (a report of 8 upstreams
	// is 264 bytes: 2.6 KB/s per edge).
	loadInterval = 100 * time.Millisecond
	// loadTTL is how long a report counts: a few intervals, so that one
	// lost report changes nothing and a gone edge stops counting within a
	// second.
	loadTTL = 5 * loadInterval
)

// tierLoad is, per upstream ID of one index, the other edges' load: the
// sum over their latest fresh reports.
type tierLoad struct {
	requests [prefixindex.MaxIDs + 1]atomic.Int64
	bytes    [prefixindex.MaxIDs + 1]atomic.Int64

	mu       sync.Mutex
	byOrigin map[uint64]*originLoad
}

// originLoad is what one other edge last reported, as IDs of this index.
type originLoad struct {
	at       time.Time
	ids      []prefixindex.ID
	requests []int64
	bytes    []int64
}

// apply replaces what origin contributed with its new report.
func (t *tierLoad) apply(origin uint64, at time.Time, ids []prefixindex.ID, requests, bytes []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byOrigin == nil {
		t.byOrigin = map[uint64]*originLoad{}
	}
	o := t.byOrigin[origin]
	if o == nil {
		o = &originLoad{}
		t.byOrigin[origin] = o
	}
	t.give(o)
	o.at = at
	o.ids = append(o.ids[:0], ids...)
	o.requests = append(o.requests[:0], requests...)
	o.bytes = append(o.bytes[:0], bytes...)
	for i, id := range o.ids {
		t.requests[id].Add(o.requests[i])
		t.bytes[id].Add(o.bytes[i])
	}
}

// expire drops the reports older than loadTTL at now.
func (t *tierLoad) expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for origin, o := range t.byOrigin {
		if now.Sub(o.at) > loadTTL {
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

// edges returns how many other edges reported within loadTTL.
func (t *tierLoad) edges() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byOrigin)
}

// reportLoad runs, for an instance with sync, until stop is closed: every
// loadInterval it publishes the process's load at the upstreams of every
// instance sharing its index (only the lowest-numbered such instance
// does, so the process reports each upstream once), and expires the other
// edges' stale reports.
func (s *PrefixCacheSelection) reportLoad(stop <-chan struct{}) {
	t := time.NewTicker(loadInterval)
	defer t.Stop()
	var report edgesync.LoadReport
	var out []byte
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s.state.tier.expire(now)
			if !s.reportsForState() {
				continue
			}
			report.Origin, report.Sent = origin, now.UnixNano()
			report.Upstreams = s.localLoads(report.Upstreams[:0])
			out = report.AppendBinary(out[:0])
			if s.sync.transport.Publish(out) {
				metrics.syncPublished(edgesync.LoadKind)
			}
		}
	}
}

// reportsForState reports whether s is the lowest-numbered live instance
// with sync on its index.
func (s *PrefixCacheSelection) reportsForState() bool {
	lowest := true
	eachInstance(func(x *PrefixCacheSelection) {
		if x != s && x.state == s.state && x.sync != nil && x.id < s.id {
			lowest = false
		}
	})
	return lowest
}

// localLoads appends this process's load at the upstreams of the
// instances sharing s's index, each upstream once.
func (s *PrefixCacheSelection) localLoads(dst []edgesync.UpstreamLoad) []edgesync.UpstreamLoad {
	seen := map[string]bool{}
	eachInstance(func(x *PrefixCacheSelection) {
		if x.state != s.state {
			return
		}
		pool := x.lastPool.Load()
		if pool == nil {
			return // no request yet: nothing in flight
		}
		for _, u := range *pool {
			if seen[u.Dial] {
				continue
			}
			seen[u.Dial] = true
			id, ok := s.state.index.ID(u.Dial)
			var bytes int64
			if ok {
				bytes = s.state.inflight.load(id)
			}
			dst = append(dst, edgesync.UpstreamLoad{Upstream: u.Dial, Requests: uint32(max(u.NumRequests(), 0)), Bytes: uint64(bytes)})
		}
	})
	return dst
}

// receiveLoad applies another edge's load report.
func (s *PrefixCacheSelection) receiveLoad(msg []byte) {
	ss := s.sync
	r := &ss.recvLoad
	if err := r.Decode(msg, 0); err != nil {
		ss.rejected[rejectMalformed].Add(1)
		metrics.syncRejected(rejectionNames[rejectMalformed])
		return
	}
	if r.Origin == origin {
		return
	}
	ss.loadIDs, ss.loadReq, ss.loadBytes = ss.loadIDs[:0], ss.loadReq[:0], ss.loadBytes[:0]
	for _, u := range r.Upstreams {
		id, ok := s.upstreamID(u.Upstream)
		if !ok {
			continue // not ours: nothing to bound
		}
		ss.loadIDs = append(ss.loadIDs, id)
		ss.loadReq = append(ss.loadReq, int64(min(u.Requests, 1<<20)))
		ss.loadBytes = append(ss.loadBytes, int64(min(u.Bytes, 1<<50)))
	}
	s.state.tier.apply(r.Origin, time.Now(), ss.loadIDs, ss.loadReq, ss.loadBytes)
	ss.applied[edgesync.LoadKind].Add(1)
	metrics.syncApplied(edgesync.LoadKind, time.Duration(time.Now().UnixNano()-r.Sent))
}
