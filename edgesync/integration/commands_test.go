package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
)

// adminPost posts to an edge's admin API and decodes its JSON answer.
func adminPost(t *testing.T, e edge, path string) map[string]any {
	t.Helper()
	resp, err := http.Post(e.admin+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d, %v", path, resp.StatusCode, err)
	}
	return out
}

// TestFlushAndForgetReachEveryEdge: in a keyed tier, a flush made through
// edge A's admin API empties edge B's index too, and a forget made there
// takes the upstream out of B's; a captured flush sent again is refused.
// In an unkeyed tier neither is sent, and a flush published on the
// channel by anyone is refused as unsigned: B keeps what it learned.
func TestFlushAndForgetReachEveryEdge(t *testing.T) {
	for _, tt := range []struct {
		name  string
		opts  string
		keyed bool
	}{
		{"hash_key", "hash_key {env.PC_TEST_HASH_KEY}", true},
		{"unkeyed", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PC_TEST_HASH_KEY", "a secret of the tier, 32 bytes..")
			r := startRedis(t)
			bs := newBackends(t, 4)
			edges := startTier(t, 2, bs, r.URL(), tt.opts)
			a, b := edges[0], edges[1]
			waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, a).Sync.Connected && stats(t, b).Sync.Connected })
			captured := readChannel(t, r.Addr)

			// learn places a conversation through edge A and waits until
			// edge B has applied its confirmation.
			learn := func(name string) string {
				before := stats(t, b).Sync.AppliedConfirmed
				_, home, _ := send(t, a.url, "", chat(words(name, 300), "q"))
				waitFor(t, 5*time.Second, "edge B applies edge A's confirmation", func() bool { return stats(t, b).Sync.AppliedConfirmed > before })
				return home
			}
			learn("flush-1")
			if n := stats(t, b).Entries; n == 0 {
				t.Fatal("edge B learned nothing from edge A")
			}

			out := adminPost(t, a, "/prefix_cache/flush")
			if out["sent_to_tier"] != tt.keyed || out["unkeyed_sync"] != !tt.keyed {
				t.Errorf("flush on edge A answered %v, want sent_to_tier %v, unkeyed_sync %v", out, tt.keyed, !tt.keyed)
			}
			if !tt.keyed {
				// Anyone on the channel sends a flush: refused, unsigned.
				forged := edgesync.Command{Kind: edgesync.FlushKind, Origin: 0xbad, Sent: time.Now().UnixNano()}
				publish(t, r.Addr, forged.AppendBinary(nil))
				waitFor(t, 5*time.Second, "edge B refuses the flush", func() bool { return stats(t, b).Sync.Rejected["unsigned_command"] == 1 })
				if n := stats(t, b).Entries; n == 0 {
					t.Errorf("an unsigned flush from the channel emptied edge B's index")
				}
				return
			}
			waitFor(t, 5*time.Second, "edge B's index is empty", func() bool { return stats(t, b).Entries == 0 })

			// The flush, captured from the channel and sent again once B
			// has learned anew, is refused.
			var flush []byte
			for _, m := range captured(3) {
				if edgesync.KindOf(m) == edgesync.FlushKind {
					flush = m
				}
			}
			if flush == nil {
				t.Fatal("no flush read from the channel")
			}
			home := learn("forget-1")
			publish(t, r.Addr, flush)
			waitFor(t, 5*time.Second, "edge B refuses the flush sent again", func() bool { return stats(t, b).Sync.Rejected["stale_command"] == 1 })
			if n := stats(t, b).Entries; n == 0 {
				t.Errorf("a flush sent again emptied edge B's index")
			}

			dial := dialOf(bs, home)
			if n := stats(t, b).Indexed[dial]; n == 0 {
				t.Fatalf("edge B holds nothing of %s before the forget", dial)
			}
			out = adminPost(t, a, fmt.Sprintf("/prefix_cache/forget?upstream=%s", dial))
			if out["sent_to_tier"] != true {
				t.Errorf("forget on edge A answered %v, want sent_to_tier true", out)
			}
			waitFor(t, 5*time.Second, "edge B forgets "+dial, func() bool { return stats(t, b).Indexed[dial] == 0 })
		})
	}
}
