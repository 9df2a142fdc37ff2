package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestNewEdgeCatchesUp: an edge started after the tier has placed some
// conversations asks for the others' recent placements as it connects,
// and the first request it gets of each of those conversations is a
// match on the upstream the other edge placed it on, not a cold
// placement.
func TestNewEdgeCatchesUp(t *testing.T) {
	for _, tt := range []struct{ name, opts string }{
		{"unkeyed", ""},
		{"hash_key", "hash_key {env.PC_TEST_HASH_KEY}"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PC_TEST_HASH_KEY", "a secret of the tier, 32 bytes..")
			r := startRedis(t)
			bs := newBackends(t, 4)
			a := startTier(t, 1, bs, r.URL(), tt.opts)[0]
			waitFor(t, 10*time.Second, "edge A connected", func() bool { return stats(t, a).Sync.Connected })
			const conversations = 6
			homes := map[int]string{}
			for c := range conversations {
				_, homes[c], _ = send(t, a.url, "", chat(words(fmt.Sprintf("catch-up-%d", c), 300), "first"))
			}

			b := startTier(t, 1, bs, r.URL(), tt.opts)[0]
			waitFor(t, 10*time.Second, "edge B catches up", func() bool {
				return stats(t, b).Sync.AppliedConfirmed >= conversations
			})
			if st := stats(t, b).Sync; st.CatchUpRequests == 0 || stats(t, a).Sync.CatchUpSent < conversations {
				t.Errorf("edge B asked %d times, edge A sent %d placements again; want at least 1 and %d", st.CatchUpRequests, stats(t, a).Sync.CatchUpSent, conversations)
			}
			for c := range conversations {
				_, got, reason := send(t, b.url, "", chat(words(fmt.Sprintf("catch-up-%d", c), 300), "first", "answer", "second"))
				if got != homes[c] || reason != "match" {
					t.Errorf("conversation %d, first request on the new edge B: %s (%s), want a match on %s", c, got, reason, homes[c])
				}
			}
		})
	}
}

// TestReconnectedEdgesCatchUp: what edge A placed while Redis was down,
// and so could not publish, reaches edge B once both have reconnected:
// each asks the other for its recent placements, and B's first request
// of A's conversation is a match on its home.
func TestReconnectedEdgesCatchUp(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 4)
	edges := startTier(t, 2, bs, r.URL(), "")
	a, b := edges[0], edges[1]
	waitFor(t, 10*time.Second, "both edges connected", func() bool { return stats(t, a).Sync.Connected && stats(t, b).Sync.Connected })
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the edges notice Redis is gone", func() bool { return !stats(t, a).Sync.Connected && !stats(t, b).Sync.Connected })
	const conversations = 4
	homes := map[int]string{}
	for c := range conversations {
		_, homes[c], _ = send(t, a.url, "", chat(words(fmt.Sprintf("while-down-%d", c), 300), "first"))
	}
	asked := stats(t, b).Sync.CatchUpRequests
	if err := r.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "edge B reconnects and asks", func() bool { return stats(t, b).Sync.CatchUpRequests > asked })
	waitFor(t, 10*time.Second, "edge B applies what edge A placed while Redis was down", func() bool {
		return stats(t, b).Sync.AppliedConfirmed >= conversations
	})
	for c := range conversations {
		_, got, reason := send(t, b.url, "", chat(words(fmt.Sprintf("while-down-%d", c), 300), "first", "answer", "second"))
		if got != homes[c] || reason != "match" {
			t.Errorf("conversation %d, placed by edge A while Redis was down, on edge B after: %s (%s), want a match on %s", c, got, reason, homes[c])
		}
	}
}
