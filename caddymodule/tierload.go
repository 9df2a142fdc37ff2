package caddymodule

import (
	"sync"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/fleet"
)

// With sync, the edges of a tier share their load too: each publishes what
// it has in flight at each upstream (requests and bytes of routing text)
// every loadInterval, and adds what the others report to its own counts
// before it bounds a candidate, so the load bound holds for the whole
// tier: four edges admit one allowance onto a replica, not four. A report
// also counts the uncached text the edge has sent each upstream, and the
// others add what it sent since its previous report to their prefill
// queues, so that a cold request goes where the tier has
// queued least prefill, not where this edge has. A request that queues
// prefill also asks for a report at once (askReport): requests come in
// bursts (Mooncake's trace sends ~10 at one timestamp), and a report
// interval later the other edges have placed the rest of the burst
// without knowing of it. A report older than five intervals (its edge
// stopped, or the transport is down) does not count, so an edge without
// fresh reports bounds by its own load alone. The reports' bookkeeping
// is the fleet's (fleet.Fleet.Report); this file publishes and decodes
// them.

const (
	// loadInterval is the default sync_load_interval, how often an edge
	// reports its load: often enough
	// that a burst on one edge is seen by the others before it has
	// admitted much of it (a request's prefill takes tens of milliseconds
	// at least), rarely enough to cost nothing (a report of 8 upstreams
	// is about 300 bytes: 3 KB/s per edge).
	loadInterval = 100 * time.Millisecond
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
	s.state.fleet.SetReportTTL(5 * interval)
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
			s.state.fleet.Expire(now)
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
				bytes = s.state.fleet.Read(id, u.Dial, 0, &fleet.Options{}).Bytes
			}
			var requests uint32
			if owners[u.Dial] == s.state {
				requests = uint32(max(u.NumRequests(), 0))
			}
			var queued uint64
			if ok {
				queued = s.state.fleet.Sent(id)
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
	ss.loads = ss.loads[:0]
	for _, u := range r.Upstreams {
		id, ok := s.upstreamID(u.Upstream)
		if !ok {
			continue // not ours: nothing to bound
		}
		ss.loads = append(ss.loads, fleet.Load{
			ID: id, Upstream: u.Upstream,
			Requests: int64(min(u.Requests, fleet.MaxReportRequests)),
			Bytes:    int64(min(u.Bytes, fleet.MaxReportBytes)),
			Sent:     u.Queued,
		})
	}
	if !s.state.fleet.Report(r.Origin, time.Now(), ss.loads, &s.fleetOptions) {
		ss.reject(rejectOrigins)
		return
	}
	if len(ss.loads) == 0 {
		return // about other pools: nothing applied
	}
	ss.applied[edgesync.LoadKind].Add(1)
	metrics.syncApplied(edgesync.LoadKind, time.Duration(time.Now().UnixNano()-r.Sent))
}
