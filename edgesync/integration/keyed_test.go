package integration_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/prefixcache/caddy-prefixcache/dialect"
	"github.com/prefixcache/caddy-prefixcache/edgesync"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// TestReaderCannotTestGuesses: a reader of the channel who guesses a
// tenant value and a prompt, and hashes them as the published scheme
// says (the unkeyed Seed and chain, and the tenant scope), finds them in
// what it reads from an unkeyed tier, and finds nothing from a tier with
// a hash_key, whose edges still share what they learn.
func TestReaderCannotTestGuesses(t *testing.T) {
	for _, tt := range []struct {
		name  string
		opts  string
		found bool
	}{
		{"unkeyed", "", true},
		{"hash_key", "hash_key {env.PC_TEST_HASH_KEY}", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PC_TEST_HASH_KEY", "a secret of the tier, 32 bytes..")
			r := startRedis(t)
			bs := newBackends(t, 4)
			edges := startTier(t, 2, bs, r.URL(), "tenant {http.request.header.Authorization}\n\t\t\t"+tt.opts)
			a, b := edges[0], edges[1]
			waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, a).Sync.Connected && stats(t, b).Sync.Connected })
			captured := readChannel(t, r.Addr)

			const tenant = "Bearer user-1042" // a low-entropy tenant value
			system := words("guessable-system", 600)
			body := chat(system, "q")
			before := stats(t, b).Sync.AppliedConfirmed
			_, home, _ := send(t, a.url, tenant, body)
			waitFor(t, 5*time.Second, "edge B applies edge A's placement", func() bool { return stats(t, b).Sync.AppliedConfirmed > before })
			if _, got, reason := send(t, b.url, tenant, chat(system, "q", "a", "q2")); reason != "match" || got != home {
				t.Errorf("second turn on edge B: %s (%s), want a match on %s: the edges must still share", got, reason, home)
			}

			// The reader's guess, hashed as the unkeyed scheme says.
			text, req, err := dialect.AppendLimit(nil, body, 2048*256)
			if err != nil {
				t.Fatal(err)
			}
			guess := prefixindex.Chunker{Size: 256, MaxChunks: 2048}.Append(nil, prefixindex.Seed(req.Model, req.CacheSalt, []byte(tenant)), text)
			guessScope := xxh3.HashSeed([]byte(tenant), 0x74656e616e74) | 1
			want := map[uint64]bool{}
			for _, h := range guess {
				want[uint64(h)] = true
			}
			msgs := captured(2)
			hashHits, scopeHits, decoded := 0, 0, 0
			for _, raw := range msgs {
				if !tt.found {
					raw = raw[:len(raw)-16] // a keyed tier's messages end in a tag
				}
				var m edgesync.Message
				if m.Decode(raw, edgesync.Limits{MaxHashes: 2048}) != nil {
					continue
				}
				decoded++
				if m.Scope == guessScope {
					scopeHits++
				}
				for _, h := range m.Hashes {
					if want[h] {
						hashHits++
					}
				}
			}
			t.Logf("%d placements read, %d decoded; the guess matched %d hashes and %d scopes", len(msgs), decoded, hashHits, scopeHits)
			if decoded < 2 {
				t.Fatalf("decoded %d of the %d placements read, want at least 2", decoded, len(msgs))
			}
			if found := hashHits > 0 && scopeHits > 0; found != tt.found {
				t.Errorf("the reader's guess found in the channel: %v (%d hashes, %d scopes), want %v", found, hashHits, scopeHits, tt.found)
			}
			if !tt.found && (hashHits > 0 || scopeHits > 0) {
				t.Errorf("with hash_key, the guess matched %d hashes and %d scopes, want none", hashHits, scopeHits)
			}
		})
	}
}

// TestKeyedTierRefusesForgeries: in a tier with a hash_key, every
// message carries a tag made with the key, so a publisher without the key
// can make up nothing. A load report claiming 2^20 requests in flight at
// the engine a conversation lives on, which an unkeyed tier counts, and a
// flood of confirmed placements are dropped as unauthenticated, while the
// edges' own messages still count and the conversation keeps its home.
func TestKeyedTierRefusesForgeries(t *testing.T) {
	for _, tt := range []struct {
		name  string
		opts  string
		keyed bool
	}{
		{"unkeyed", "", false},
		{"hash_key", "hash_key {env.PC_TEST_HASH_KEY}", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PC_TEST_HASH_KEY", "a secret of the tier, 32 bytes..")
			r := startRedis(t)
			bs := newBackends(t, 2)
			edges := startTier(t, 2, bs, r.URL(), "load_allowance 0\n\t\t\tload_allowance_bytes off\n\t\t\tcold_load_factor off\n\t\t\tprefill_rate off\n\t\t\t"+tt.opts)
			a, b := edges[0], edges[1]
			waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, a).Sync.Connected && stats(t, b).Sync.Connected })
			send(t, b.url, "", chat("another", "so that edge B lists its pool in stats"))
			system := words("forged-system", 600)
			_, home, _ := send(t, a.url, "", chat(system, "first"))
			waitFor(t, 5*time.Second, "edge B hears edge A", func() bool { return stats(t, b).Sync.TierEdges == 1 })
			// Edge A's own confirmation arrives on its own time: count from
			// after it.
			waitFor(t, 5*time.Second, "edge B applies edge A's confirmation", func() bool { return stats(t, b).Sync.AppliedConfirmed >= 1 })

			forged := edgesync.LoadReport{Origin: 0xbad, Sent: time.Now().UnixNano(), Upstreams: []edgesync.UpstreamLoad{{Upstream: dialOf(bs, home), Requests: 1 << 20}}}
			var flood [][]byte
			for i := range 50 {
				hashes := make([]uint64, 256)
				for j := range hashes {
					hashes[j] = uint64(i)<<32 | uint64(j)
				}
				m := edgesync.Message{Origin: 0xbad, Kind: edgesync.Confirmed, ChunkSize: 256, Upstream: dialOf(bs, home), Hashes: hashes}
				flood = append(flood, m.AppendBinary(nil))
			}
			before := stats(t, b)
			publish(t, r.Addr, append([][]byte{forged.AppendBinary(nil)}, flood...)...)
			if tt.keyed {
				waitFor(t, 5*time.Second, "edge B drops the forgeries", func() bool {
					return stats(t, b).Sync.Rejected["unauthenticated"] >= before.Sync.Rejected["unauthenticated"]+51
				})
				// The flood's 12,800 made-up hashes would grow edge B's
				// index. (Its count of applied confirmations would not
				// do: edge A may publish its own again, answering the
				// catch-up edge B asked for when it connected.)
				if st := stats(t, b); st.Entries != before.Entries || st.Sync.TierEdges != 1 {
					t.Errorf("after the forgeries, edge B holds %d entries more and counts %d edges; want none and 1", st.Entries-before.Entries, st.Sync.TierEdges)
				}
			} else {
				waitFor(t, 5*time.Second, "edge B counts the forged load", func() bool { return upstreams(t, b)[dialOf(bs, home)].RemoteInFlight >= 1<<20 })
				waitFor(t, 5*time.Second, "edge B indexes the forged placements", func() bool { return stats(t, b).Entries >= before.Entries+50*256 })
			}
			if !tt.keyed {
				return // the control: the forged load counted
			}
			_, got, reason := send(t, b.url, "", chat(system, "first", "a", "second"))
			if reason != "match" || got != home {
				t.Errorf("second turn on edge B after the forgeries: %s (%s), want a match on %s", got, reason, home)
			}
		})
	}
}

// readChannel subscribes to the tier's channel as any Redis client could,
// speaking RESP, and returns a function that waits for at least n
// placement messages and returns those read so far.
func readChannel(t *testing.T, addr string) func(n int) [][]byte {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\ncaddy-prefix-cache\r\n", len("caddy-prefix-cache"))
	br := bufio.NewReader(conn)
	msgs := make(chan []byte, 1024)
	ready := make(chan struct{})
	go func() {
		defer close(msgs)
		first := true
		for {
			parts, err := readArray(br)
			if err != nil {
				return
			}
			if first {
				close(ready)
				first = false
			}
			if len(parts) == 3 && parts[0] == "message" && edgesync.KindOf([]byte(parts[2])) != edgesync.LoadKind {
				select {
				case msgs <- []byte(parts[2]):
				default:
				}
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("no SUBSCRIBE confirmation from Redis")
	}
	return func(n int) [][]byte {
		var out [][]byte
		deadline := time.After(5 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					return out
				}
				out = append(out, m)
				continue
			default:
			}
			if len(out) >= n {
				return out
			}
			select {
			case m, ok := <-msgs:
				if !ok {
					return out
				}
				out = append(out, m)
			case <-deadline:
				t.Fatalf("read %d placements from the channel, want at least %d", len(out), n)
			}
		}
	}
}

// readArray reads one RESP array of bulk strings.
func readArray(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	var parts []string
	for range n {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		switch line[0] {
		case ':':
			parts = append(parts, strings.TrimSpace(line[1:]))
		case '$':
			size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
			if err != nil {
				return nil, err
			}
			b := make([]byte, size+2)
			if _, err := io.ReadFull(br, b); err != nil {
				return nil, err
			}
			parts = append(parts, string(b[:size]))
		default:
			return nil, fmt.Errorf("unexpected %q", line)
		}
	}
	return parts, nil
}
