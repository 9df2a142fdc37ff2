package redis

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap/zaptest"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
)

// Deadlines: everything here runs on loopback, where a message takes well
// under a millisecond and a reconnect a few backoff steps of at most
// testMaxBackoff. The deadlines are generous so a loaded CI machine under
// the race detector does not fail them; tests wait on the event itself and
// end as soon as it happens.
const (
	deliverWithin   = 5 * time.Second
	reconnectWithin = 10 * time.Second
	testMinBackoff  = 5 * time.Millisecond
	testMaxBackoff  = 50 * time.Millisecond
)

// newTransport provisions a transport for url as the named edge, with a
// fast reconnect backoff, and cleans it up with the test.
func newTransport(t testing.TB, edge, url string, opts ...func(*Transport)) *Transport {
	t.Helper()
	tr := &Transport{URL: url}
	for _, o := range opts {
		o(tr)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := tr.provision(ctx, tuning{minBackoff: testMinBackoff, maxBackoff: testMaxBackoff, edge: edge}); err != nil {
		t.Fatalf("Provision(url %q) = %v", tr.URL, err)
	}
	// Logs go to the test's log, shown when it fails.
	tr.conn.setLogger(zaptest.NewLogger(t))
	t.Cleanup(func() { _ = tr.Cleanup() })
	return tr
}

func withTimeout(d time.Duration) func(*Transport) {
	return func(tr *Transport) { tr.Timeout = caddy.Duration(d) }
}

func withBuffer(n int) func(*Transport) {
	return func(tr *Transport) { tr.Buffer = n }
}

// waitConnected waits until tr's Connected is want.
func waitConnected(t testing.TB, tr *Transport, want bool, within time.Duration) {
	t.Helper()
	waitStatus(t, tr, fmt.Sprintf("connected %v", want), func(st edgesync.Status) bool { return st.Connected == want }, within)
}

// waitStatus waits until tr's Status satisfies cond, woken by the
// connection's change notifications rather than by polling.
func waitStatus(t testing.TB, tr *Transport, what string, cond func(edgesync.Status) bool, within time.Duration) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		changed := tr.conn.changes()
		st := tr.Status()
		if cond(st) {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no %s within %v: Status() = %+v", what, within, st)
		}
	}
}

// inbox collects what a subscriber receives.
type inbox chan []byte

// subscribe registers an inbox on tr. Its subscriber never blocks: a
// message that finds the inbox full is lost, and tests size it.
func subscribe(t testing.TB, tr *Transport, size int) inbox {
	t.Helper()
	in := make(inbox, size)
	cancel := tr.Subscribe(func(msg []byte) {
		select {
		case in <- bytes.Clone(msg):
		default:
		}
	})
	t.Cleanup(cancel)
	return in
}

// expect waits for want, skipping other messages (earlier ones, echoes).
func (in inbox) expect(t testing.TB, want []byte, within time.Duration) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		select {
		case got := <-in:
			if bytes.Equal(got, want) {
				return
			}
		case <-deadline.C:
			t.Fatalf("message %.40x… not received within %v", want, within)
		}
	}
}

// publishUntilReceived publishes msg every few milliseconds until in gets
// it: right after a (re)subscription the other edge's subscription may not
// be confirmed yet, and Pub/Sub delivers only to confirmed subscribers.
func publishUntilReceived(t testing.TB, from *Transport, in inbox, msg []byte, within time.Duration) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	from.Publish(msg)
	for {
		select {
		case got := <-in:
			if bytes.Equal(got, msg) {
				return
			}
		case <-tick.C:
			from.Publish(msg)
		case <-deadline.C:
			t.Fatalf("message %.40x… not received within %v (publisher %+v)", msg, within, from.Status())
		}
	}
}

// placement returns an encoded placement message with n hashes, numbered
// by seq so tests can tell messages apart.
func placement(seq, n int) []byte {
	m := edgesync.Message{Origin: 1, Sent: time.Now().UnixNano(), Kind: edgesync.Placed, ChunkSize: 256, Upstream: "10.0.0.11:8000"}
	for i := range n {
		m.Hashes = append(m.Hashes, uint64(seq)<<32|uint64(i))
	}
	return m.AppendBinary(nil)
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func redisURL(addr string) string { return fmt.Sprintf("redis://%s/0", addr) }
