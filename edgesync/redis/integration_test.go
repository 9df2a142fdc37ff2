package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
)

// These tests run against a real redis-server that each test starts on a
// free loopback port (redisserver_test.go); without redis-server they
// skip, except in CI.

// TestRealTwoEdges: every message one edge publishes reaches the other,
// in order, and the first one within deliverWithin (on loopback it takes
// well under a millisecond; the test logs it).
func TestRealTwoEdges(t *testing.T) {
	s := startRedis(t)
	a := newTransport(t, "a", s.url())
	b := newTransport(t, "b", s.url())
	const n = 1000
	in := subscribe(t, b, n)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)

	first := placement(0, 128)
	start := time.Now()
	a.Publish(first)
	in.expect(t, first, deliverWithin)
	t.Logf("first message from edge a to edge b: %v", time.Since(start))

	want := make([][]byte, n)
	for i := range want {
		want[i] = placement(i+1, 128)
		if !a.Publish(want[i]) {
			t.Fatalf("Publish(%d of %d) into a buffer of %d = false: %+v", i, n, DefaultBuffer, a.Status())
		}
	}
	start = time.Now()
	for i := range want {
		in.expect(t, want[i], deliverWithin)
	}
	t.Logf("%d messages of %d bytes from a to b: %v", n, len(want[0]), time.Since(start))
	// b can have them all before a has read the replies of its last
	// pipeline.
	waitStatus(t, a, "all published", func(st edgesync.Status) bool { return st.Published+st.Dropped() == n+1 }, deliverWithin)
	if st := a.Status(); st.Published != n+1 || st.Dropped() != 0 {
		t.Errorf("publisher Status() = %+v, want %d published, none dropped", st, n+1)
	}
	if st := b.Status(); st.Received != n+1 {
		t.Errorf("receiver Status().Received = %d, want %d", st.Received, n+1)
	}
}

// TestRealRestart: redis-server killed mid-run and started again on the
// same port. Publish never blocks while it is gone (a tight loop of
// 100,000 calls completes, every call counted), both edges resubscribe by
// themselves, and messages flow again.
func TestRealRestart(t *testing.T) {
	s := startRedis(t)
	a := newTransport(t, "a", s.url())
	b := newTransport(t, "b", s.url())
	inB := subscribe(t, b, 64)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	msg := placement(1, 8)
	a.Publish(msg)
	inB.expect(t, msg, deliverWithin)

	s.stop()
	waitConnected(t, a, false, reconnectWithin)
	waitConnected(t, b, false, reconnectWithin)
	tightLoop(t, a, 100000)
	if st := a.Status(); st.DroppedDisconnected < 100000 || st.LastError == "" {
		t.Errorf("Status() with Redis gone = %+v, want the drops counted and a reason", st)
	}

	s.start()
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	publishUntilReceived(t, a, inB, placement(2, 8), deliverWithin)
	if st := b.Status(); st.Reconnects != 1 || !st.Connected {
		t.Errorf("Status() after restart = %+v, want 1 reconnect, connected", st)
	}
}

// TestRealDownAtStart: Redis is not there when Caddy provisions; it starts
// later and the edges connect without help.
func TestRealDownAtStart(t *testing.T) {
	bin := lookRedisServer(t)
	port, _ := strconv.Atoi(strings.TrimPrefix(freeAddr(t), "127.0.0.1:"))
	s := &redisServer{t: t, bin: bin, dir: t.TempDir(), port: port}
	a := newTransport(t, "a", s.url())
	b := newTransport(t, "b", s.url())
	inB := subscribe(t, b, 16)
	tightLoop(t, a, 10000)
	waitStatus(t, a, "a reason for not connecting", func(st edgesync.Status) bool { return st.LastError != "" }, reconnectWithin)

	s.start()
	t.Cleanup(s.stop)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	msg := placement(1, 8)
	a.Publish(msg)
	inB.expect(t, msg, deliverWithin)
}

// TestRealPaused: a Redis that stops answering (SIGSTOP: sockets open,
// nothing read) is the slow case. Publish still never blocks: the queue
// fills and further messages drop as full; the health check declares the
// connection dead within two timeouts, and after SIGCONT both edges come
// back and messages flow.
func TestRealPaused(t *testing.T) {
	s := startRedis(t)
	const timeout = 200 * time.Millisecond
	a := newTransport(t, "a", s.url(), withTimeout(timeout), withBuffer(64))
	b := newTransport(t, "b", s.url(), withTimeout(timeout))
	inB := subscribe(t, b, 64)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	publishUntilReceived(t, a, inB, placement(0, 8), deliverWithin)

	s.pause()
	resumed := false
	defer func() {
		if !resumed {
			s.resume()
		}
	}()
	paused := time.Now()
	tightLoop(t, a, 100000)
	if st := a.Status(); st.DroppedFull == 0 && st.DroppedDisconnected == 0 {
		t.Errorf("Status() after 100000 Publish calls into a hung Redis = %+v, want drops", st)
	}
	waitConnected(t, a, false, reconnectWithin)
	waitConnected(t, b, false, reconnectWithin)
	t.Logf("hung Redis noticed after %v (timeout %v)", time.Since(paused), timeout)
	tightLoop(t, a, 100000)

	s.resume()
	resumed = true
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	publishUntilReceived(t, a, inB, placement(1, 8), deliverWithin)
}

// TestRealHostile: garbage, truncated and 8 MiB messages published on the
// channel by a stranger pass through to the subscriber, which survives
// them, and Decode refuses every one.
func TestRealHostile(t *testing.T) {
	s := startRedis(t)
	testHostile(t, s.addr())
}

// TestRealReload: a second provision with the same url and channel (a
// reload) opens no connection to Redis.
func TestRealReload(t *testing.T) {
	s := startRedis(t)
	admin := goredis.NewClient(&goredis.Options{Addr: s.addr(), Protocol: 2})
	defer admin.Close()
	old := newTransport(t, "", s.url())
	in := subscribe(t, old, 16)
	waitConnected(t, old, true, reconnectWithin)
	msg := placement(0, 8)
	old.Publish(msg)
	in.expect(t, msg, deliverWithin)
	before := connectionsReceived(t, admin)

	cur := newTransport(t, "", s.url())
	inCur := subscribe(t, cur, 16)
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	msg = placement(1, 8)
	cur.Publish(msg)
	inCur.expect(t, msg, deliverWithin)
	if after := connectionsReceived(t, admin); after != before {
		t.Errorf("Redis accepted %d connections over the reload, want 0", after-before)
	}
}

// connectionsReceived reads INFO stats' total_connections_received, less
// the admin client's own.
func connectionsReceived(t *testing.T, admin *goredis.Client) int {
	t.Helper()
	info, err := admin.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no total_connections_received in INFO stats:\n%s", info)
	return 0
}

// TestRealOversizedFlood: a publisher that floods the channel with
// messages of 31 MB, far larger than any placement (MaxMessageSize),
// fills the subscribers' output buffers in Redis, which then drops the
// subscriptions (client-output-buffer-limit pubsub, 32 MB by default):
// sync is off for as long as the flood lasts. Redis set as docs/sync.md
// says (proto-max-bulk-len 1mb) refuses such a PUBLISH before it reaches
// any subscriber: the edge stays subscribed, without a reconnect, and
// placements keep arriving.
func TestRealOversizedFlood(t *testing.T) {
	s := startRedis(t, "--proto-max-bulk-len", "1mb")
	a := newTransport(t, "a", s.url())
	b := newTransport(t, "b", s.url())
	in := subscribe(t, b, 64)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	publishUntilReceived(t, a, in, placement(1, 8), deliverWithin)

	hostile := goredis.NewClient(&goredis.Options{Addr: s.addr(), Protocol: 2, MaxRetries: -1})
	defer hostile.Close()
	huge := make([]byte, 31<<20)
	refused := 0
	for range 8 {
		if err := hostile.Publish(context.Background(), DefaultChannel, huge).Err(); err != nil {
			refused++
		}
	}
	if refused != 8 {
		t.Errorf("Redis accepted %d of 8 PUBLISHes of 31 MB, want none", 8-refused)
	}
	publishUntilReceived(t, a, in, placement(2, 8), deliverWithin)
	if st := b.Status(); !st.Connected || st.Reconnects != 0 || st.Oversized != 0 {
		t.Errorf("after the flood, the subscriber's Status() = %+v, want connected, no reconnect, nothing oversized received", st)
	}
}

// TestRealACL: the edges' Redis user of docs/sync.md, which may only
// publish and subscribe on the tier's channel, is all an edge needs.
func TestRealACL(t *testing.T) {
	s := startRedis(t, "--user", "default", "off",
		"--user", "edge", "on", ">test-secret", "resetchannels", "&"+DefaultChannel, "-@all", "+publish", "+subscribe", "+ping", "+hello", "+auth")
	url := "redis://edge:test-secret@" + s.addr() + "/0"
	a := newTransport(t, "a", url)
	b := newTransport(t, "b", url)
	in := subscribe(t, b, 64)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	publishUntilReceived(t, a, in, placement(1, 8), deliverWithin)

	other := goredis.NewClient(&goredis.Options{Addr: s.addr(), Username: "edge", Password: "test-secret", Protocol: 2})
	defer other.Close()
	if err := other.Publish(context.Background(), "another-channel", "x").Err(); err == nil {
		t.Error("the edges' user published on another channel")
	}
}
