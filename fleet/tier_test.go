package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// loads builds a report of ids with requests and bytes.
func loads(ids []prefixindex.ID, requests, bytes []int64) []Load {
	l := make([]Load, len(ids))
	for i, id := range ids {
		l[i] = Load{ID: id, Requests: requests[i], Bytes: bytes[i]}
	}
	return l
}

const interval = DefaultReportTTL / 5

// An edge's report replaces its previous one, reports of several edges
// add up, and a report older than the TTL stops counting.
func TestTierLoad(t *testing.T) {
	var tl tierLoad
	now := time.Now()
	ids := []prefixindex.ID{1, 2}
	tl.apply(7, now, loads(ids, []int64{3, 1}, []int64{300, 100}))
	tl.apply(8, now, loads(ids[:1], []int64{2}, []int64{50}))
	if r, b := tl.load(1); r != 5 || b != 350 {
		t.Errorf("upstream 1: %d requests, %d bytes; want 5 and 350 (two edges)", r, b)
	}
	tl.apply(7, now.Add(interval), loads(ids, []int64{0, 4}, []int64{0, 400}))
	if r, _ := tl.load(1); r != 2 {
		t.Errorf("upstream 1 after edge 7's new report: %d requests, want 2 (the new report replaces the old)", r)
	}
	if r, b := tl.load(2); r != 4 || b != 400 {
		t.Errorf("upstream 2: %d, %d; want 4, 400", r, b)
	}
	if n := tl.edges(); n != 2 {
		t.Errorf("edges() = %d, want 2", n)
	}
	tl.expire(now.Add(DefaultReportTTL + interval/2)) // edge 8 is stale, edge 7 not yet
	if r, _ := tl.load(1); r != 0 {
		t.Errorf("upstream 1 after edge 8 went quiet: %d requests, want 0", r)
	}
	if r, _ := tl.load(2); r != 4 {
		t.Errorf("upstream 2: %d requests, want edge 7's 4", r)
	}
	tl.expire(now.Add(2 * DefaultReportTTL))
	if r, b := tl.load(2); r != 0 || b != 0 || tl.edges() != 0 {
		t.Errorf("after every edge went quiet: %d, %d, %d edges; want nothing", r, b, tl.edges())
	}
}

// With a report interval of its own, a report counts for the TTL set.
func TestTierLoadTTL(t *testing.T) {
	var f Fleet
	f.SetReportTTL(5 * 20 * time.Millisecond)
	now := time.Now()
	f.Report(7, now, loads([]prefixindex.ID{1}, []int64{3}, []int64{300}), own)
	f.Expire(now.Add(90 * time.Millisecond))
	if r, _ := f.Reported(1); r != 3 {
		t.Errorf("at 90ms of a 100ms TTL: %d requests, want 3", r)
	}
	f.Expire(now.Add(110 * time.Millisecond))
	if r, _ := f.Reported(1); r != 0 {
		t.Errorf("at 110ms of a 100ms TTL: %d requests, want 0", r)
	}
}

// What an edge sent an upstream grows between its reports: the growth is
// counted once, from the second report naming the upstream on, and a
// counter that went down (the edge restarted) or a report applied twice
// grows nothing.
func TestTierLoadQueuedGrowth(t *testing.T) {
	var tl tierLoad
	now := time.Now()
	ids := []prefixindex.ID{1, 2}
	apply := func(origin uint64, ids []prefixindex.ID, sent ...uint64) []int64 {
		t.Helper()
		l := make([]Load, len(ids))
		for i, id := range ids {
			l[i] = Load{ID: id, Sent: sent[i], Grown: -1}
		}
		if !tl.apply(origin, now, l) {
			t.Fatal("report refused")
		}
		grown := make([]int64, len(l))
		for i := range l {
			grown[i] = l[i].Grown
		}
		return grown
	}
	for _, c := range []struct {
		name   string
		origin uint64
		ids    []prefixindex.ID
		sent   []uint64
		want   []int64
	}{
		{"first report: a baseline", 7, ids, []uint64{5000, 100}, []int64{0, 0}},
		{"grown", 7, ids, []uint64{8000, 100}, []int64{3000, 0}},
		{"the same report again", 7, ids, []uint64{8000, 100}, []int64{0, 0}},
		{"another edge's first", 8, ids, []uint64{1 << 40, 1}, []int64{0, 0}},
		{"restarted: went down", 7, ids, []uint64{10, 100}, []int64{0, 0}},
		{"after the restart", 7, ids, []uint64{510, 600}, []int64{500, 500}},
		{"an upstream left the report", 7, ids[1:], []uint64{700}, []int64{100}},
		{"and came back: a baseline again", 7, ids, []uint64{900, 800}, []int64{0, 100}},
		{"beyond what a report may add", 8, ids, []uint64{1<<40 + 2*MaxReportBytes, 1}, []int64{MaxReportBytes, 0}},
	} {
		if got := apply(c.origin, c.ids, c.sent...); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: grown %v, want %v", c.name, got, c.want)
		}
	}
}

// At most MaxOrigins other edges count at once; a report naming nothing
// takes back what its edge contributed; claims are clamped.
func TestTierLoadOrigins(t *testing.T) {
	var f Fleet
	now := time.Now()
	for o := range uint64(MaxOrigins + 10) {
		ok := f.Report(o, now, []Load{{ID: 1, Requests: 1 << 40, Bytes: 1 << 62}}, own)
		if want := o < MaxOrigins; ok != want {
			t.Fatalf("Report from origin %d = %v, want %v", o, ok, want)
		}
	}
	if n := f.Edges(); n != MaxOrigins {
		t.Errorf("Edges() = %d, want %d", n, MaxOrigins)
	}
	if r, b := f.Reported(1); r != MaxOrigins*MaxReportRequests || b != MaxOrigins*MaxReportBytes {
		t.Errorf("Reported(1) = %d, %d; want each claim clamped: %d, %d", r, b, MaxOrigins*MaxReportRequests, MaxOrigins*MaxReportBytes)
	}
	f.Report(0, now, nil, own)
	if n := f.Edges(); n != MaxOrigins-1 {
		t.Errorf("after an empty report: Edges() = %d, want %d", n, MaxOrigins-1)
	}
}

// The other edges' reports count at most RemoteRatio times this edge's
// own load at the upstream with the request being placed, in requests
// and bytes, and the prefill queue at most what that lets in flight; an
// honest report within the ratio counts whole.
func TestCountedClampsReports(t *testing.T) {
	var f Fleet
	now := time.Now()
	o := &Options{Tier: true, NsPerByte: 1000}
	f.Report(7, now, []Load{{ID: 1, Requests: 1 << 20, Bytes: 1 << 40}, {ID: 2, Requests: 3, Bytes: 3000}}, o)
	f.Report(7, now, []Load{{ID: 1, Requests: 1 << 20, Bytes: 1 << 40, Sent: 1 << 40}, {ID: 2, Requests: 3, Bytes: 3000}}, o)
	ns := now.UnixNano()
	for _, tt := range []struct {
		name        string
		id          prefixindex.ID
		own         int
		prompt      int64
		holds       bool
		wantReq     int
		wantBytes   int64
		wantQueued  int64
		wantCounted bool
	}{
		{"forged, nothing of this edge's there", 1, 0, 1000, false, RemoteRatio, RemoteRatio * 1000, RemoteRatio * 1000, false},
		{"forged, two of this edge's there", 1, 2, 1000, false, RemoteRatio * 3, RemoteRatio * 1000, RemoteRatio * 1000, false},
		// Where the request holds a prefix and this edge has no
		// uncached text in flight, the forged queue counts for
		// nothing, whatever the prompt being placed.
		{"forged, at a holder", 1, 0, 1000, true, RemoteRatio, RemoteRatio * 1000, 0, false},
		{"honest, within the ratio", 2, 0, 1000, false, 3, 3000, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := f.Counted(f.Read(tt.id, "a:1", ns, o), tt.id, "a:1", ns, tt.own, tt.prompt, tt.holds, o)
			if st.RemoteRequests != tt.wantReq || st.RemoteBytes != tt.wantBytes {
				t.Errorf("Counted(own %d, prompt %d) = %d requests, %d bytes; want %d, %d", tt.own, tt.prompt, st.RemoteRequests, st.RemoteBytes, tt.wantReq, tt.wantBytes)
			}
			if st.Queued > tt.wantQueued || st.Wait != int64(float64(st.Queued)*o.NsPerByte) {
				t.Errorf("Counted: queued %d (wait %d), want at most %d", st.Queued, st.Wait, tt.wantQueued)
			}
			if raw := f.Read(tt.id, "a:1", ns, o); (raw.RemoteRequests == st.RemoteRequests) != tt.wantCounted {
				t.Errorf("Read says %d remote requests, Counted %d; want the report counted whole: %v", raw.RemoteRequests, st.RemoteRequests, tt.wantCounted)
			}
		})
	}
	if st := f.Counted(f.Read(1, "a:1", ns, &Options{}), 1, "a:1", ns, 0, 0, false, &Options{}); st.RemoteRequests != 0 {
		t.Errorf("Counted without Options.Tier: %d remote requests, want 0", st.RemoteRequests)
	}
}
