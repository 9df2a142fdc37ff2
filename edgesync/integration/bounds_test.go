package integration_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/fleet"
)

// forgeLoad publishes, every 50 ms until the test ends, load reports of
// three made-up edges claiming 2^20 requests and 2^40 bytes in flight,
// and ever more prefill sent, at each of dials: what a publisher on an
// unkeyed channel can send.
func forgeLoad(t *testing.T, addr string, dials []string) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for n := uint64(1); ; n++ {
			var msgs [][]byte
			for origin := uint64(0xbad1); origin <= 0xbad3; origin++ {
				r := edgesync.LoadReport{Origin: origin, Sent: time.Now().UnixNano()}
				for _, d := range dials {
					r.Upstreams = append(r.Upstreams, edgesync.UpstreamLoad{Upstream: d, Requests: 1 << 20, Bytes: 1 << 40, Queued: n << 30})
				}
				msgs = append(msgs, r.AppendBinary(nil))
			}
			_ = publishTo(addr, msgs...) // a report lost is one of many
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
}

// TestForgedLoadCannotSteerTheTier: load reports claiming 2^20 requests
// in flight at three of four upstreams, from three made-up edges, no
// longer send everything to the fourth. Conversations that live on the
// three keep their homes, and new conversations go to the fourth only
// until it holds a few more than the claims count, then to the others.
func TestForgedLoadCannotSteerTheTier(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 4)
	edges := startTier(t, 1, bs, r.URL(), "")
	e := edges[0]
	waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, e).Sync.Connected })

	// Eight conversations placed before the forgery.
	homes := map[int]string{}
	count := map[string]int{}
	for c := range 8 {
		_, home, _ := send(t, e.url, "", chat(words(fmt.Sprintf("steer-%d", c), 300), "first"))
		homes[c] = home
		count[home]++
	}
	spared := bs[0].name
	for _, b := range bs {
		if count[b.name] < count[spared] {
			spared = b.name
		}
	}
	var forged []string
	for _, b := range bs {
		if b.name != spared {
			forged = append(forged, dialOf(bs, b.name))
		}
	}
	forgeLoad(t, r.Addr, forged)
	waitFor(t, 5*time.Second, "the edge hears the forged reports", func() bool {
		ups := upstreams(t, e)
		for _, d := range forged {
			if ups[d].RemoteInFlight < 1<<20 {
				return false
			}
		}
		return true
	})
	// The forged queue joins the edge's estimate from the second report
	// on, the first being the baseline its growth is taken from.
	waitFor(t, 5*time.Second, "the edge queues the forged prefill", func() bool {
		ups := upstreams(t, e)
		for _, d := range forged {
			if ups[d].PrefillBacklog == 0 {
				return false
			}
		}
		return true
	})
	for _, d := range forged {
		// The stats count for a request to come: the reports clamped to
		// RemoteRatio times the edge's own in flight there, plus one.
		if u := upstreams(t, e)[d]; u.Counted != fleet.RemoteRatio*(u.InFlight+1) {
			t.Errorf("%s: %d remote requests reported, %d counted with %d of the edge's own; want %d counted", d, u.RemoteInFlight, u.Counted, u.InFlight, fleet.RemoteRatio*(u.InFlight+1))
		}
	}

	// Warm: every conversation's next turn stays home.
	for c := range 8 {
		_, got, reason := send(t, e.url, "", chat(words(fmt.Sprintf("steer-%d", c), 300), "first", "answer", "second"))
		if got != homes[c] || reason != "match" {
			t.Errorf("conversation %d (home %s) under forged load: %s (%s), want a match at home", c, homes[c], got, reason)
		}
	}

	// Cold: sixteen new conversations, each held in flight before the
	// next is sent.
	var wg sync.WaitGroup
	defer func() {
		for _, x := range bs {
			select {
			case <-x.hold:
			default:
				close(x.hold)
			}
		}
		wg.Wait()
	}()
	const held = 16
	for i := range held {
		wg.Go(func() { hold(e.url, chat(words(fmt.Sprintf("new-%d", i), 300), "hello")) })
		waitFor(t, 5*time.Second, fmt.Sprintf("%d requests held", i+1), func() bool {
			n := 0
			for _, u := range upstreams(t, e) {
				n += u.InFlight
			}
			return n == i+1
		})
	}
	ups := upstreams(t, e)
	at := ups[dialOf(bs, spared)].InFlight
	t.Logf("of %d new conversations held in flight, %d went to %s, the upstream the forger spared", held, at, spared)
	if at > held-3 {
		t.Errorf("%d of %d new conversations went to %s, the upstream the forged reports spared; want at least 3 elsewhere", at, held, spared)
	}
	if code, _, _ := send(t, e.url, "", chat("sys", "still serving")); code != http.StatusOK {
		t.Errorf("under forged load: %d", code)
	}
}

// TestPlacementFloodKeepsTenantsMatch: a flood of confirmed placements
// under made-up tenant scopes, a hundred times the index, is applied on
// an unkeyed tier on probation, so it evicts nothing a tenant's answered
// requests confirmed: the tenant's conversation is still a match after
// it, and the index stays within max_entries.
func TestPlacementFloodKeepsTenantsMatch(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 4)
	edges := startTier(t, 1, bs, r.URL(), "tenant {http.request.header.Authorization}\n\t\t\tmax_entries 4096")
	e := edges[0]
	waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, e).Sync.Connected })
	captured := readChannel(t, r.Addr)

	system := words("flood-system", 600)
	_, home, _ := send(t, e.url, "Bearer a", chat(system, "q"))
	captured(2) // the edge published its placement and, once answered, its confirmation

	var flood [][]byte
	for i := range 200 { // 200 x 2048 unique hashes: 100 times the index
		hashes := make([]uint64, 2048)
		for j := range hashes {
			hashes[j] = uint64(i+1)<<32 | uint64(j)
		}
		m := edgesync.Message{Origin: 0xbad, Kind: edgesync.Confirmed, ChunkSize: 256,
			Scope: uint64(i+1) * 0x9e3779b97f4a7c15, Upstream: dialOf(bs, "b0"), Hashes: hashes}
		flood = append(flood, m.AppendBinary(nil))
	}
	before := stats(t, e).Sync.AppliedConfirmed
	publish(t, r.Addr, flood...)
	waitFor(t, 10*time.Second, "the flood is applied", func() bool { return stats(t, e).Sync.AppliedConfirmed == before+200 })
	if n := stats(t, e).Entries; n > 4096 {
		t.Errorf("%d entries after the flood, more than max_entries 4096", n)
	}
	if _, got, reason := send(t, e.url, "Bearer a", chat(system, "q", "a", "q2")); reason != "match" || got != home {
		t.Errorf("tenant a's second turn after the flood: %s (%s), want a match on %s", got, reason, home)
	}
}
