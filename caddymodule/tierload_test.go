package caddymodule

import (
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// An edge's report replaces its previous one, reports of several edges
// add up, and a report older than loadTTL stops counting.
func TestTierLoad(t *testing.T) {
	var tl tierLoad
	now := time.Now()
	ids := []prefixindex.ID{1, 2}
	tl.apply(7, now, ids, []int64{3, 1}, []int64{300, 100}, []int64{200, 0})
	tl.apply(8, now, ids[:1], []int64{2}, []int64{50}, []int64{40})
	if r, b := tl.load(1); r != 5 || b != 350 {
		t.Errorf("upstream 1: %d requests, %d bytes; want 5 and 350 (two edges)", r, b)
	}
	if q := tl.queued(1); q != 240 {
		t.Errorf("upstream 1: %d bytes queued, want 240 (two edges)", q)
	}
	tl.apply(7, now.Add(loadInterval), ids, []int64{0, 4}, []int64{0, 400}, []int64{0, 300})
	if r, _ := tl.load(1); r != 2 {
		t.Errorf("upstream 1 after edge 7's new report: %d requests, want 2 (the new report replaces the old)", r)
	}
	if q1, q2 := tl.queued(1), tl.queued(2); q1 != 40 || q2 != 300 {
		t.Errorf("after edge 7's new report: %d and %d bytes queued, want 40 and 300", q1, q2)
	}
	if r, b := tl.load(2); r != 4 || b != 400 {
		t.Errorf("upstream 2: %d, %d; want 4, 400", r, b)
	}
	if n := tl.edges(); n != 2 {
		t.Errorf("edges() = %d, want 2", n)
	}
	tl.expire(now.Add(loadTTL + loadInterval/2)) // edge 8 is stale, edge 7 not yet
	if r, _ := tl.load(1); r != 0 {
		t.Errorf("upstream 1 after edge 8 went quiet: %d requests, want 0", r)
	}
	if r, _ := tl.load(2); r != 4 {
		t.Errorf("upstream 2: %d requests, want edge 7's 4", r)
	}
	tl.expire(now.Add(2 * loadTTL))
	if r, b := tl.load(2); r != 0 || b != 0 || tl.queued(2) != 0 || tl.edges() != 0 {
		t.Errorf("after every edge went quiet: %d, %d, %d edges; want nothing", r, b, tl.edges())
	}
}

// With a sync_load_interval of its own, a report counts for five of it.
func TestTierLoadTTL(t *testing.T) {
	var tl tierLoad
	tl.ttl.Store(int64(5 * 20 * time.Millisecond))
	now := time.Now()
	tl.apply(7, now, []prefixindex.ID{1}, []int64{3}, []int64{300}, []int64{0})
	tl.expire(now.Add(90 * time.Millisecond))
	if r, _ := tl.load(1); r != 3 {
		t.Errorf("at 90ms of a 100ms TTL: %d requests, want 3", r)
	}
	tl.expire(now.Add(110 * time.Millisecond))
	if r, _ := tl.load(1); r != 0 {
		t.Errorf("at 110ms of a 100ms TTL: %d requests, want 0", r)
	}
}
