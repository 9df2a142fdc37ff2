package caddymodule

import (
	"bytes"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// The placements kept for edges that catch up stay within
// catchUpMessages and catchUpBytes, the newest kept, oldest first; a
// filter keeps the order.
func TestRecentPlacementsBounded(t *testing.T) {
	var r recentPlacements
	for i := range catchUpMessages + 100 {
		r.add([]byte{byte(i), byte(i >> 8)})
	}
	got := r.snapshot(nil)
	last := catchUpMessages + 99
	if len(got) != catchUpMessages || !bytes.Equal(got[0], []byte{100, 0}) || !bytes.Equal(got[len(got)-1], []byte{byte(last), byte(last >> 8)}) {
		t.Fatalf("after %d small messages: %d kept, first %v, last %v; want the last %d", catchUpMessages+100, len(got), got[0], got[len(got)-1], catchUpMessages)
	}
	big := bytes.Repeat([]byte{1}, catchUpBytes/3+1)
	for range 5 {
		r.add(big)
	}
	// Small messages through every slot after large ones: the slots do
	// not keep the large buffers.
	for range catchUpMessages {
		r.add(big)
		r.add([]byte("small"))
	}
	for range 3 {
		r.add(big)
	}
	if r.bytes > catchUpBytes || len(r.snapshot(nil)) != 2 {
		t.Errorf("after five messages of a third of catchUpBytes: %d bytes in %d messages, want at most %d in 2", r.bytes, r.n, catchUpBytes)
	}
	r.add(make([]byte, catchUpBytes+1))
	if r.n != 2 {
		t.Errorf("a message larger than catchUpBytes was kept")
	}
	held := 0
	for k := range catchUpMessages {
		held += cap(r.msgs[k])
	}
	if held > 2*catchUpBytes+catchUpMessages*1024 {
		t.Errorf("the ring's buffers hold %d bytes, more than twice catchUpBytes and a kilobyte a slot", held)
	}
	r.add([]byte("keep"))
	r.filter(func(m []byte) bool { return len(m) < 10 })
	if got := r.snapshot(nil); len(got) != 1 || string(got[0]) != "keep" || r.bytes != 4 {
		t.Errorf("filter kept %q (%d bytes), want only \"keep\"", got, r.bytes)
	}
}

// Keeping a confirmed placement for edges that catch up allocates
// nothing in steady state, once the kept slots have grown to the
// messages' size; and publishing a confirmation keeps it.
func TestKeepPlacementAllocs(t *testing.T) {
	s := syncing(t, "publish-allocs", 7019, poolOf("10.7.1.1:8000"))
	v := &view{hashes: make([]prefixindex.Hash, 64)}
	for i := range v.hashes {
		v.hashes[i] = prefixindex.Hash(i + 1)
	}
	for range catchUpMessages + 1 {
		s.publish(edgesync.Confirmed, v, "10.7.1.1:8000", 0)
	}
	r := &s.sync.catchUp.recent
	if r.n != catchUpMessages {
		t.Errorf("%d placements kept after %d published, want %d", r.n, catchUpMessages+1, catchUpMessages)
	}
	msg := r.snapshot(nil)[0]
	n := testing.AllocsPerRun(2*catchUpMessages, func() { r.add(msg) })
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector; .ci/run counts them without it")
	}
	if n != 0 {
		t.Errorf("keeping a placement allocates %v times, want 0", n)
	}
}

// An edge whose transport reconnected asks the others to catch it up,
// however briefly it was down: down for less than catchUpPoll, its
// watcher never sees it disconnected, but the transport's reconnect
// count tells.
func TestCatchUpAfterABriefReconnect(t *testing.T) {
	s := syncing(t, "brief-reconnect", 1000, poolOf("10.7.2.1:8000"))
	requested := func(want uint64, why string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for s.sync.catchUp.requested.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d catch-up requests, want %d", why, s.sync.catchUp.requested.Load(), want)
			}
			time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
		}
	}
	requested(1, "an edge connected with an empty index")
	busNamed("brief-reconnect").reconnects.Add(1)
	requested(2, "the transport reconnected between two looks")
}
