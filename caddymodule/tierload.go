package caddymodule

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// With sync, the edges of a tier share their load too: each publishes what
// it has in flight at each upstream (requests and bytes of routing text)
// every loadInterval, and adds what the others report to its own counts
// before it bounds a candidate, so the load bound holds for the whole
// tier: four edges admit one allowance onto a replica, not four. A report
// also counts the uncached text the edge has sent each upstream, and the
// others add what it sent since its previous report to their prefill
// queues (prefillQueues), so that a cold request goes where the tier has
// queued least prefill, not where this edge has. A request that queues
// prefill also asks for a report at once (askReport): requests come in
// bursts (Mooncake's trace sends ~10 at one timestamp), and a report
// interval later the other edges have placed the rest of the burst
// without knowing of it. A report older than loadTTL (its edge stopped,
// or the transport is down) does not count, so an edge without fresh
// reports bounds by its own load alone.

const (
	// loadInterval is the default sync_load_interval, how often an edge
	// reports its load: often enough
	// that a burst on one edge is seen by the others before it has
	// admitted much of it (a request's prefill takes tens of milliseconds
	// at least), rarely enough to cost nothing (a report of 8 upstreams
	// is about 300 bytes: 3 KB/s per edge).
	loadInterval = 100 * time.Millisecond
	// loadTTL is how long a report counts: a few intervals, so that one
	// lost report changes nothing and a gone edge stops counting within a
	// second. With another sync_load_interval, it is that many of those.
	loadTTL = 5 * loadInterval

	// minLoadInterval and maxLoadInterval bound sync_load_interval: a
	// report per upstream every 10 ms is 100 publishes a second per edge,
	// and one every 10 s is too stale to bound anything.
	minLoadInterval = 10 * time.Millisecond
	maxLoadInterval = 10 * time.Second

	// minReportGap is the least time between two reports that requests
	// asked for, so that a burst of placements is one report a
	// millisecond: at most a thousand a second per edge, each smaller
	// than the placements that asked for it.
	minReportGap = time.Millisecond
)

// Bounds on what load reports can make an edge hold and add up, whatever
// a publisher on the channel sends.
const (
	// maxLoadOrigins is the most other edges whose reports count at once:
	// far more than any tier has, few enough that the reports' storage
	// and the sums below stay small. A report from one more edge is
	// dropped, counted as too_many_origins, until a counted edge goes
	// quiet for loadTTL.
	maxLoadOrigins = 256
	// maxReportRequests and maxReportBytes clamp one edge's reported
	// load at one upstream: a million requests, 1 TiB of routing text
	// (maxSize) in flight or sent since its previous report. Summed over
	// maxLoadOrigins edges they stay far below what an int64 holds.
	maxReportRequests = 1 << 20
	maxReportBytes    = maxSize
)

// tierLoad is, per upstream ID of one index, the other edges' load: the
// sum over their latest fresh reports.
type tierLoad struct {
	requests [prefixindex.MaxIDs + 1]atomic.Int64
	bytes    [prefixindex.MaxIDs + 1]atomic.Int64
	ttl      atomic.Int64 // how long a report counts; 0: loadTTL

	mu       sync.Mutex
	byOrigin map[uint64]*originLoad
}

// originLoad is what one other edge last reported, as IDs of this index.
type originLoad struct {
	at       time.Time
	ids      []prefixindex.ID
	requests []int64
	bytes    []int64
	// queued is each upstream's Queued as last reported, from which the
	// next report's growth is taken; prev is the map before it, kept to
	// be reused.
	queued, prev map[prefixindex.ID]uint64
}

// apply replaces what origin contributed with its new report, and reports
// false if it could not count it: maxLoadOrigins other edges count
// already. A report that names none of the index's upstreams (ids is
// empty) takes back what origin contributed and keeps no entry for it.
// The new contribution is added before the old one is taken out, so that
// a concurrent reader sees at worst both, never too little load.
//
// grown[i] is set to how much queued[i] grew since origin's previous
// report named ids[i], at most maxReportBytes: 0 the first time, and
// when it went down (the edge restarted). Applying the same report twice
// grows nothing the second time.
func (t *tierLoad) apply(origin uint64, at time.Time, ids []prefixindex.ID, requests, bytes []int64, queued []uint64, grown []int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.byOrigin[origin]
	if len(ids) == 0 {
		if o != nil {
			t.give(o)
			delete(t.byOrigin, origin)
		}
		return true
	}
	if o == nil {
		if len(t.byOrigin) >= maxLoadOrigins {
			return false
		}
		if t.byOrigin == nil {
			t.byOrigin = map[uint64]*originLoad{}
		}
		o = &originLoad{}
		t.byOrigin[origin] = o
	}
	for i, id := range ids {
		t.requests[id].Add(min(max(requests[i], 0), maxReportRequests))
		t.bytes[id].Add(min(max(bytes[i], 0), maxReportBytes))
	}
	t.give(o)
	o.at = at
	o.ids = append(o.ids[:0], ids...)
	o.requests = o.requests[:0]
	o.bytes = o.bytes[:0]
	for i := range ids {
		o.requests = append(o.requests, min(max(requests[i], 0), maxReportRequests))
		o.bytes = append(o.bytes, min(max(bytes[i], 0), maxReportBytes))
	}
	o.prev, o.queued = o.queued, o.prev
	if o.queued == nil {
		o.queued = make(map[prefixindex.ID]uint64, len(ids))
	}
	clear(o.queued)
	for i, id := range ids {
		grown[i] = 0
		if prev, ok := o.prev[id]; ok && queued[i] > prev {
			grown[i] = int64(min(queued[i]-prev, maxReportBytes))
		}
		o.queued[id] = queued[i]
	}
	return true
}

// expire drops the reports older than the TTL (loadTTL, or what the
// reporting instance set) at now.
func (t *tierLoad) expire(now time.Time) {
	ttl := time.Duration(t.ttl.Load())
	if ttl == 0 {
		ttl = loadTTL
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

// edges returns how many other edges reported within loadTTL.
func (t *tierLoad) edges() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byOrigin)
}

// Each index state of a process reports its own instances' load, under
// an origin of its own: two states (two shapes of index, each with its own
// reporter) publishing under one origin would replace each other's
// reports on every other edge. Placements keep the process's origin.

// loadOrigin is the origin of the load reports of the state with key: the
// process's origin XOR a nonzero hash of the key.
func loadOrigin(key string) uint64 {
	return origin ^ (xxh3.HashString(key) | 1)
}

// loadOrigins are the load origins of every state of this process that
// has had an instance with sync, so that a report from a sibling state
// is known for an echo. Entries stay: a report published just before its
// state went away may still arrive, and the set grows only with the
// index shapes the process ever synced.
var loadOrigins struct {
	sync.Mutex
	set map[uint64]bool
}

// registerLoadOrigin adds the load origin of the state with key.
func registerLoadOrigin(key string) {
	loadOrigins.Lock()
	defer loadOrigins.Unlock()
	if loadOrigins.set == nil {
		loadOrigins.set = map[uint64]bool{}
	}
	loadOrigins.set[loadOrigin(key)] = true
}

// ownLoadOrigin reports whether o is the origin of this process's
// reports.
func ownLoadOrigin(o uint64) bool {
	if o == origin {
		return true
	}
	loadOrigins.Lock()
	defer loadOrigins.Unlock()
	return loadOrigins.set[o]
}

// sharesLoad reports whether s shares its load with the other edges:
// sync, with sync_load on.
func (s *PrefixCacheSelection) sharesLoad() bool {
	return s.sync != nil && *s.SyncLoad
}

// startLoadReports starts the instance's load reports, once it is in the
// list of instances (addInstance), which the reports read.
func (s *PrefixCacheSelection) startLoadReports() {
	if s.sharesLoad() {
		go s.reportLoad(s.sync.stopLoad)
	}
}

// askReport asks the instance that reports st's load for a report at
// once, without waiting: asks made before it reports are one report. A
// report asked for as a request starts counts it in flight, and its end
// is reported at the next interval, so for up to an interval the other
// edges may count a request that has ended: their bound errs toward
// spilling, never toward overloading.
func (st *sharedState) askReport() {
	select {
	case st.reportNow <- struct{}{}:
	default:
	}
}

// reportLoad runs, for an instance with sync, until stop is closed: every
// loadInterval, and when a request asks (askReport) but at most once per
// minReportGap, it publishes the process's load at the upstreams of every
// instance sharing its index (only the lowest-numbered such instance
// does, so the process reports each upstream once per state); every
// loadInterval it also expires the other edges' stale reports.
func (s *PrefixCacheSelection) reportLoad(stop <-chan struct{}) {
	interval := time.Duration(s.SyncLoadInterval)
	s.state.tier.ttl.Store(int64(5 * interval))
	t := time.NewTicker(interval)
	defer t.Stop()
	gap := time.NewTimer(minReportGap)
	gap.Stop()
	var report edgesync.LoadReport
	var out []byte
	publish := func(now time.Time) {
		out = s.sync.seal(s.appendLoadReport(out[:0], &report, now))
		if s.sync.transport.Publish(out) {
			metrics.syncPublished(edgesync.LoadKind)
		}
	}
	// asked is the state's reportNow while s reports for the state, else
	// nil, so that an instance that does not report leaves the asks to
	// the one that does.
	var asked chan struct{}
	if s.reportsForState() {
		asked = s.state.reportNow
	}
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s.state.tier.expire(now)
			asked = nil
			if !s.reportsForState() {
				continue
			}
			asked = s.state.reportNow
			publish(now)
		case <-asked:
			publish(time.Now())
			// Rest for the gap: asks made meanwhile wait in reportNow,
			// to be one report after it.
			gap.Reset(minReportGap)
			select {
			case <-stop:
				return
			case <-gap.C:
			}
		}
	}
}

// appendLoadReport fills report with the load of s's state at now and
// appends its encoding to dst.
func (s *PrefixCacheSelection) appendLoadReport(dst []byte, report *edgesync.LoadReport, now time.Time) []byte {
	report.Origin, report.Sent = loadOrigin(s.state.key), now.UnixNano()
	report.Upstreams = s.localLoads(report.Upstreams[:0])
	return report.AppendBinary(dst)
}

// reportsForState reports whether s is the lowest-numbered live instance
// with sync and sync_load on its index.
func (s *PrefixCacheSelection) reportsForState() bool {
	if !s.sharesLoad() {
		return false
	}
	lowest := true
	eachInstance(func(x *PrefixCacheSelection) {
		if x != s && x.state == s.state && x.sharesLoad() && x.id < s.id {
			lowest = false
		}
	})
	return lowest
}

// localLoads appends this process's load at the upstreams of the
// instances sharing s's index, each upstream once.
//
// Bytes in flight are the state's own count, so each state reports its
// own. Caddy counts an upstream's requests per process (its Host), so
// where the pools of two states share an upstream, only one of them
// reports its requests (see requestOwners): the other edges add up the
// two states' reports.
func (s *PrefixCacheSelection) localLoads(dst []edgesync.UpstreamLoad) []edgesync.UpstreamLoad {
	owners := requestOwners()
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
			var requests uint32
			if owners[u.Dial] == s.state {
				requests = uint32(max(u.NumRequests(), 0))
			}
			var queued uint64
			if ok {
				queued = s.state.queued[id].Load()
			}
			dst = append(dst, edgesync.UpstreamLoad{Upstream: u.Dial, Requests: requests, Bytes: uint64(bytes), Queued: queued})
		}
	})
	return dst
}

// requestOwners returns, for each upstream in the pool of an instance
// whose state reports load (has an instance with sync), the state that
// reports its requests: that of the lowest-numbered such instance.
func requestOwners() map[string]*sharedState {
	var list []*PrefixCacheSelection
	syncing := map[*sharedState]bool{}
	eachInstance(func(x *PrefixCacheSelection) {
		list = append(list, x)
		if x.sharesLoad() {
			syncing[x.state] = true
		}
	})
	owners := map[string]*sharedState{}
	lowest := map[string]uint64{}
	for _, x := range list {
		pool := x.lastPool.Load()
		if pool == nil || !syncing[x.state] {
			continue
		}
		for _, u := range *pool {
			if id, ok := lowest[u.Dial]; !ok || x.id < id {
				lowest[u.Dial], owners[u.Dial] = x.id, x.state
			}
		}
	}
	return owners
}

// receiveLoad applies another edge's load report. Every instance sharing
// the index maps it alike (upstreamID), so that instances receiving the
// same report replace one another's application of it with the same
// thing.
func (s *PrefixCacheSelection) receiveLoad(msg []byte) {
	if !*s.SyncLoad {
		return // this instance bounds by its own load
	}
	ss := s.sync
	r := &ss.recvLoad
	if err := r.Decode(msg, 0); err != nil {
		ss.reject(decodeRejection(err))
		return
	}
	if ownLoadOrigin(r.Origin) {
		return
	}
	ss.loadIDs, ss.loadDials, ss.loadReq, ss.loadBytes, ss.loadQueued = ss.loadIDs[:0], ss.loadDials[:0], ss.loadReq[:0], ss.loadBytes[:0], ss.loadQueued[:0]
	for _, u := range r.Upstreams {
		id, ok := s.upstreamID(u.Upstream)
		if !ok {
			continue // not ours: nothing to bound
		}
		ss.loadIDs = append(ss.loadIDs, id)
		ss.loadDials = append(ss.loadDials, u.Upstream)
		ss.loadReq = append(ss.loadReq, int64(min(u.Requests, maxReportRequests)))
		ss.loadBytes = append(ss.loadBytes, int64(min(u.Bytes, maxReportBytes)))
		ss.loadQueued = append(ss.loadQueued, u.Queued)
	}
	ss.loadGrown = grow(ss.loadGrown, len(ss.loadIDs))
	now := time.Now()
	if !s.state.tier.apply(r.Origin, now, ss.loadIDs, ss.loadReq, ss.loadBytes, ss.loadQueued, ss.loadGrown) {
		ss.reject(rejectOrigins)
		return
	}
	if len(ss.loadIDs) == 0 {
		return // about other pools: nothing applied
	}
	if s.nsPerByte > 0 {
		// What the other edge sent since its last report joins the
		// upstreams' prefill queues, as this edge's requests do.
		nowNS := now.UnixNano()
		for i, id := range ss.loadIDs {
			if n := ss.loadGrown[i]; n > 0 {
				s.state.prefill.add(id, nowNS, n, s.prefillNs(id, ss.loadDials[i], nowNS))
			}
		}
	}
	ss.applied[edgesync.LoadKind].Add(1)
	metrics.syncApplied(edgesync.LoadKind, time.Duration(time.Now().UnixNano()-r.Sent))
}
