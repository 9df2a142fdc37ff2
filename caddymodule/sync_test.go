package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/fleet"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

func init() {
	caddy.RegisterModule(new(fakeTransport))
}

// fakeTransport is the http.prefix_cache.sync.fake module of these tests: a
// transport whose messages go nowhere by themselves. Publish records a
// copy on the bus named Bus; the test hands messages to the subscribers
// with deliver, on its own goroutine, as a transport does on its own.
type fakeTransport struct {
	Bus string `json:"bus,omitempty"`
	bus *fakeBus
}

type fakeBus struct {
	mu        sync.Mutex
	published [][]byte
	subs      []*func([]byte)
	next      chan struct{} // closed at the next publish (nextPublish)
	// reconnects is what Status reports: a test adds one to stand for
	// a connection lost and made again.
	reconnects atomic.Uint64
}

var fakeBuses sync.Map // name -> *fakeBus

func busNamed(name string) *fakeBus {
	b, _ := fakeBuses.LoadOrStore(name, &fakeBus{})
	return b.(*fakeBus)
}

func (*fakeTransport) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.prefix_cache.sync.fake",
		New: func() caddy.Module { return new(fakeTransport) },
	}
}

func (f *fakeTransport) Provision(caddy.Context) error {
	f.bus = busNamed(f.Bus)
	return nil
}

func (f *fakeTransport) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() {
		f.Bus = d.Val()
	}
	return nil
}

func (f *fakeTransport) Publish(msg []byte) bool {
	f.bus.mu.Lock()
	defer f.bus.mu.Unlock()
	f.bus.published = append(f.bus.published, bytes.Clone(msg))
	if f.bus.next != nil {
		close(f.bus.next)
		f.bus.next = nil
	}
	return true
}

func (f *fakeTransport) Subscribe(fn func([]byte)) func() {
	p := &fn
	f.bus.mu.Lock()
	f.bus.subs = append(f.bus.subs, p)
	f.bus.mu.Unlock()
	return func() {
		f.bus.mu.Lock()
		defer f.bus.mu.Unlock()
		for i, q := range f.bus.subs {
			if q == p {
				f.bus.subs = append(f.bus.subs[:i:i], f.bus.subs[i+1:]...)
				return
			}
		}
	}
}

func (f *fakeTransport) Status() edgesync.Status {
	return edgesync.Status{Transport: "fake", Connected: true, Reconnects: f.bus.reconnects.Load()}
}

// deliver hands msg to every subscriber, one after another.
func (b *fakeBus) deliver(msg []byte) {
	b.mu.Lock()
	subs := slices.Clone(b.subs)
	b.mu.Unlock()
	for _, fn := range subs {
		(*fn)(msg)
	}
}

// nextPublish returns a channel closed at the next publish on b.
func (b *fakeBus) nextPublish() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == nil {
		b.next = make(chan struct{})
	}
	return b.next
}

// loadReports returns the load reports published so far.
func (b *fakeBus) loadReports(t *testing.T) []edgesync.LoadReport {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []edgesync.LoadReport
	for _, msg := range b.published {
		if edgesync.KindOf(msg) != edgesync.LoadKind {
			continue
		}
		var r edgesync.LoadReport
		if err := r.Decode(msg, 0); err != nil {
			t.Fatalf("a published load report does not decode: %v", err)
		}
		out = append(out, r)
	}
	return out
}

// syncing returns a provisioned policy syncing over the fake bus, with
// max_entries maxEntries (which, with the default chunk size, names its
// index state), routing from pool.
func syncing(t *testing.T, bus string, maxEntries int, pool reverseproxy.UpstreamPool) *PrefixCacheSelection {
	t.Helper()
	s := provisioned(t, &PrefixCacheSelection{
		MaxEntries: maxEntries,
		SyncRaw:    json.RawMessage(fmt.Sprintf(`{"transport":"fake","bus":%q}`, bus)),
	})
	s.notePool(pool)
	s.upstreams.table(s.state.index, pool) // as Select does: interns the pool
	return s
}

func poolOf(dials ...string) reverseproxy.UpstreamPool {
	var pool reverseproxy.UpstreamPool
	for _, d := range dials {
		pool = append(pool, &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: d})
	}
	return pool
}

func loadReport(origin uint64, loads ...edgesync.UpstreamLoad) []byte {
	r := edgesync.LoadReport{Origin: origin, Sent: time.Now().UnixNano(), Upstreams: loads}
	return r.AppendBinary(nil)
}

func placementFor(dial string, hashes ...uint64) []byte {
	m := edgesync.Message{Origin: 4242, Sent: time.Now().UnixNano(), Kind: edgesync.Confirmed,
		ChunkSize: prefixindex.DefaultChunkSize, Upstream: dial, Hashes: hashes}
	return m.AppendBinary(nil)
}

// Two instances sharing an index state (two sites, or one pool per model)
// map another edge's messages alike, whichever pool they are about: a
// load report naming upstreams of both pools counts at all of them, not
// only at the pool of the instance that happened to receive it last, and
// a placement for the sibling's pool is applied, not rejected. A name in
// neither pool is still refused and never interned.
func TestSiblingInstancesMapMessagesAlike(t *testing.T) {
	const bus = "siblings"
	a := syncing(t, bus, 7001, poolOf("10.7.1.1:8000", "10.7.1.2:8000"))
	b := syncing(t, bus, 7001, poolOf("10.7.2.1:8000", "10.7.2.2:8000"))
	if a.state != b.state {
		t.Fatal("the two instances do not share their index state")
	}
	st := a.state

	busNamed(bus).deliver(loadReport(99,
		edgesync.UpstreamLoad{Upstream: "10.7.1.1:8000", Requests: 3, Bytes: 300},
		edgesync.UpstreamLoad{Upstream: "10.7.2.1:8000", Requests: 5, Bytes: 500},
		edgesync.UpstreamLoad{Upstream: "203.0.113.9:8000", Requests: 7, Bytes: 700},
	))
	for _, tt := range []struct {
		dial string
		of   *PrefixCacheSelection
		want int
	}{{"10.7.1.1:8000", a, 3}, {"10.7.2.1:8000", b, 5}} {
		id, _ := st.index.ID(tt.dial)
		if got, _ := st.fleet.Reported(id); got != tt.want {
			t.Errorf("remote requests at %s (pool of instance %d) = %d, want %d", tt.dial, tt.of.id, got, tt.want)
		}
	}
	if n := st.fleet.Edges(); n != 1 {
		t.Errorf("tier.edges() = %d, want 1", n)
	}

	busNamed(bus).deliver(placementFor("10.7.2.2:8000", 1, 2, 3))
	busNamed(bus).deliver(placementFor("203.0.113.9:8000", 4, 5, 6))
	for _, x := range []*PrefixCacheSelection{a, b} {
		if got := x.sync.applied[edgesync.Confirmed].Load(); got != 1 {
			t.Errorf("instance %d applied %d placements, want 1 (the one for its sibling's pool)", x.id, got)
		}
		if got := x.sync.rejected[rejectUpstream].Load(); got != 1 {
			t.Errorf("instance %d rejected %d placements as unknown_upstream, want 1 (the stranger)", x.id, got)
		}
	}
	if _, ok := st.index.ID("203.0.113.9:8000"); ok {
		t.Error("a name in no pool was interned")
	}
}

// Two index states of one process (two shapes) each report their own
// instances' load under an origin of their own, so that the other edges
// keep both reports; neither is the process's placement origin, and each
// is an echo to the other state here, not remote load.
func TestLoadReportsOfTwoStates(t *testing.T) {
	const bus = "two-states"
	a := syncing(t, bus, 7002, poolOf("10.7.3.1:8000"))
	b := syncing(t, bus, 7003, poolOf("10.7.4.1:8000"))
	if a.state == b.state {
		t.Fatal("the two instances share their index state")
	}
	now := time.Now()
	var ra, rb edgesync.LoadReport
	for _, x := range []struct {
		s *PrefixCacheSelection
		r *edgesync.LoadReport
	}{{a, &ra}, {b, &rb}} {
		if !x.s.reportsForState() {
			t.Fatalf("instance %d does not report for its state", x.s.id)
		}
		msg := x.s.appendLoadReport(nil, x.r, now)
		busNamed(bus).deliver(msg)
	}
	if ra.Origin == rb.Origin {
		t.Errorf("both states report under origin %#x: the other edges would keep one report of the two", ra.Origin)
	}
	if ra.Origin == origin || rb.Origin == origin {
		t.Errorf("a load report has the process's placement origin %#x", origin)
	}
	if len(ra.Upstreams) != 1 || ra.Upstreams[0].Upstream != "10.7.3.1:8000" || len(rb.Upstreams) != 1 || rb.Upstreams[0].Upstream != "10.7.4.1:8000" {
		t.Errorf("reports %+v and %+v, want each state's own upstream", ra.Upstreams, rb.Upstreams)
	}
	for _, x := range []*PrefixCacheSelection{a, b} {
		if n, applied := x.state.fleet.Edges(), x.sync.applied[edgesync.LoadKind].Load(); n != 0 || applied != 0 {
			t.Errorf("instance %d counted this process's own reports: %d edges, %d applied; want none", x.id, n, applied)
		}
	}
}

// Where the pools of two states share an upstream, only the state of the
// lower-numbered instance reports its requests (Caddy counts them per
// process), so the other edges, which add the two states' reports up,
// count them once.
func TestSharedUpstreamRequestsReportedOnce(t *testing.T) {
	const bus = "shared-upstream"
	a := syncing(t, bus, 7004, poolOf("10.7.5.1:8000", "10.7.5.9:8000"))
	b := syncing(t, bus, 7005, poolOf("10.7.5.9:8000", "10.7.6.1:8000"))
	owners := requestOwners()
	for dial, want := range map[string]*sharedState{"10.7.5.1:8000": a.state, "10.7.5.9:8000": a.state, "10.7.6.1:8000": b.state} {
		if got := owners[dial]; got != want {
			name := "none"
			if got != nil {
				name = got.key
			}
			t.Errorf("requests of %s reported by state %s, want %s", dial, name, want.key)
		}
	}
}

// Load reports from hostile or too many publishers are bounded: at most
// fleet.MaxOrigins edges count at once (one more is rejected as
// too_many_origins), a report naming none of the pool's upstreams keeps no
// entry and takes back what its origin had reported, and the largest
// values that fit the wire, from every counted edge at once, add up
// without overflowing.
func TestHostileLoadReports(t *testing.T) {
	const bus = "hostile-load"
	s := syncing(t, bus, 7006, poolOf("10.7.7.1:8000"))
	st := s.state
	id, _ := st.index.ID("10.7.7.1:8000")
	huge := edgesync.UpstreamLoad{Upstream: "10.7.7.1:8000", Requests: 1<<32 - 1, Bytes: 1<<64 - 1}
	for o := range uint64(fleet.MaxOrigins + 10) {
		busNamed(bus).deliver(loadReport(1000+o, huge))
	}
	// Each counted edge then claims to have sent the upstream all a
	// counter holds: the prefill queue stays within its hour.
	huge.Queued = 1<<64 - 1
	for o := range uint64(fleet.MaxOrigins + 10) {
		busNamed(bus).deliver(loadReport(1000+o, huge))
	}
	if left := st.fleet.Read(id, "10.7.7.1:8000", time.Now().UnixNano(), &s.fleetOptions).Wait; left <= 0 || left > int64(fleet.MaxWait) {
		t.Errorf("prefill queue drains in %v after hostile reports, want within (0, %v]", time.Duration(left), fleet.MaxWait)
	}
	if n := st.fleet.Edges(); n != fleet.MaxOrigins {
		t.Errorf("tier.edges() = %d after %d origins, want the cap %d", n, fleet.MaxOrigins+10, fleet.MaxOrigins)
	}
	if got := s.sync.rejected[rejectOrigins].Load(); got != 20 {
		t.Errorf("rejected as too_many_origins: %d, want 20 (10 origins past the cap, twice)", got)
	}
	req, bytes := st.fleet.Reported(id)
	if req != fleet.MaxOrigins*fleet.MaxReportRequests || bytes != fleet.MaxOrigins*fleet.MaxReportBytes {
		t.Errorf("tier.load = %d requests, %d bytes; want %d and %d (each report clamped, no overflow)",
			req, bytes, fleet.MaxOrigins*fleet.MaxReportRequests, int64(fleet.MaxOrigins)*fleet.MaxReportBytes)
	}

	// Strangers' reports, naming nothing of ours, keep no entry.
	st.fleet.Expire(time.Now().Add(2 * fleet.DefaultReportTTL))
	for o := range uint64(fleet.MaxOrigins + 10) {
		busNamed(bus).deliver(loadReport(5000+o, edgesync.UpstreamLoad{Upstream: "203.0.113.9:8000", Requests: 1}))
	}
	if n := st.fleet.Edges(); n != 0 {
		t.Errorf("tier.edges() = %d after reports naming no upstream of ours, want 0", n)
	}
	// Such a report from a counted edge takes its earlier one back.
	busNamed(bus).deliver(loadReport(77, edgesync.UpstreamLoad{Upstream: "10.7.7.1:8000", Requests: 4}))
	busNamed(bus).deliver(loadReport(77, edgesync.UpstreamLoad{Upstream: "203.0.113.9:8000", Requests: 4}))
	if n, _ := st.fleet.Reported(id); n != 0 || st.fleet.Edges() != 0 {
		t.Errorf("after edge 77 stopped naming the upstream: %d remote requests, %d edges; want none", n, st.fleet.Edges())
	}
}

// A message of another wire version is counted apart from garbage, so
// that a rolling upgrade shows as one.
func TestVersionMismatchCountedApart(t *testing.T) {
	const bus = "versions"
	s := syncing(t, bus, 7007, poolOf("10.7.8.1:8000"))
	v2 := placementFor("10.7.8.1:8000", 1)
	v2[2] = edgesync.Version + 1
	v2load := loadReport(3, edgesync.UpstreamLoad{Upstream: "10.7.8.1:8000"})
	v2load[2] = edgesync.Version + 1
	for _, msg := range [][]byte{v2, v2load, []byte("garbage")} {
		busNamed(bus).deliver(msg)
	}
	if v, m := s.sync.rejected[rejectVersion].Load(), s.sync.rejected[rejectMalformed].Load(); v != 2 || m != 1 {
		t.Errorf("rejected %d as version and %d as malformed, want 2 and 1", v, m)
	}
}

// stopSync may run twice (a Cleanup after a failed Provision, then
// another), and must not close its channel twice.
func TestStopSyncTwice(t *testing.T) {
	s := syncing(t, "stop-twice", 7008, poolOf("10.7.9.1:8000"))
	s.stopSync()
	s.stopSync()
}

// Config reloads while the admin API's stats and the metrics are read: a
// new instance is published to their readers only once its sync is set
// up (run with -race).
func TestReloadWhileStatsRead(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(backend.Close)
	admin, site := loopbackAddr(t), loopbackAddr(t)
	adminOn := fmt.Sprintf(`{"listen": %q, "config": {"persist": false}}`, admin)
	cfg := func(i int) []byte {
		return reloadingConfig(i, adminOn, errorsOnly, site, backend.Listener.Addr().String(),
			`"max_entries": 7009, "sync": {"transport": "fake", "bus": "reload"}`)
	}
	if err := caddy.Load(cfg(0), true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping Caddy: %v", err)
		}
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, path := range []string{"/prefix_cache/stats", "/metrics"} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get("http://" + admin + path)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for i := 1; i <= 20; i++ {
		if err := caddy.Load(cfg(i), true); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
}

// loopbackAddr returns a loopback address that was free a moment ago.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Interface guards
var (
	_ edgesync.Transport    = (*fakeTransport)(nil)
	_ caddy.Provisioner     = (*fakeTransport)(nil)
	_ caddyfile.Unmarshaler = (*fakeTransport)(nil)
)

// With sync_load off an instance shares placements but not load: it
// neither reports for its state nor counts the other edges' reports,
// and the state's instance with sync_load on reports in its stead.
func TestSyncLoadOff(t *testing.T) {
	const bus = "sync-load-off"
	off := false
	s := provisioned(t, &PrefixCacheSelection{
		MaxEntries: 7007,
		SyncRaw:    json.RawMessage(fmt.Sprintf(`{"transport":"fake","bus":%q}`, bus)),
		SyncLoad:   &off,
	})
	pool := poolOf("10.7.8.1:8000")
	s.notePool(pool)
	s.upstreams.table(s.state.index, pool)
	id, _ := s.state.index.ID("10.7.8.1:8000")
	busNamed(bus).deliver(loadReport(91, edgesync.UpstreamLoad{Upstream: "10.7.8.1:8000", Requests: 9, Bytes: 900}))
	if n, _ := s.state.fleet.Reported(id); n != 0 || s.sync.applied[edgesync.LoadKind].Load() != 0 {
		t.Errorf("with sync_load off: %d remote requests counted, %d reports applied; want none", n, s.sync.applied[edgesync.LoadKind].Load())
	}
	if s.reportsForState() {
		t.Error("an instance with sync_load off reports its state's load")
	}
	on := syncing(t, bus, 7007, pool) // the same state, sync_load on by default
	if on.state != s.state {
		t.Fatal("the two instances do not share their index state")
	}
	if !on.reportsForState() {
		t.Error("the state's instance with sync_load on does not report: a lower-numbered one with it off stands in its way")
	}
	busNamed(bus).deliver(loadReport(92, edgesync.UpstreamLoad{Upstream: "10.7.8.1:8000", Requests: 3, Bytes: 300}))
	if n, _ := on.state.fleet.Reported(id); n != 3 {
		t.Errorf("with sync_load on: %d remote requests, want 3", n)
	}
}

// A request that queues prefill has its edge report its load at once, not
// a report interval later: requests arrive in bursts, and the other edges
// place the rest of a burst by what the report says. Reports are due every
// 10 s here; the request's uncached text must be reported long before.
func TestQueuedPrefillReportedAtOnce(t *testing.T) {
	const bus = "report-at-once"
	s := provisioned(t, &PrefixCacheSelection{
		MaxEntries:       7013,
		SyncRaw:          json.RawMessage(fmt.Sprintf(`{"transport":"fake","bus":%q}`, bus)),
		SyncLoadInterval: caddy.Duration(maxLoadInterval),
	})
	b := busNamed(bus)
	u := s.Select(testPool(2), chatRequest(t, testChat), nil)
	if u == nil {
		t.Fatal("Select() = nil with 2 available upstreams")
	}
	deadline := time.NewTimer(maxLoadInterval / 4)
	defer deadline.Stop()
	for {
		published := b.nextPublish()
		for _, r := range b.loadReports(t) {
			for _, l := range r.Upstreams {
				if l.Upstream == u.Dial && l.Queued > 0 {
					return
				}
			}
		}
		select {
		case <-published:
		case <-deadline.C:
			t.Fatalf("no load report counts the request's uncached text at %s within %v; reports are due every %v",
				u.Dial, maxLoadInterval/4, maxLoadInterval)
		}
	}
}
