package redis

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/caddyserver/caddy/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/prefixcache/caddy-prefixcache/edgesync"
)

// These tests run against miniredis, an in-process server that speaks
// Redis's protocol; integration_test.go repeats the ones that matter
// against a real redis-server.

func TestModuleInfo(t *testing.T) {
	info := new(Transport).CaddyModule()
	if info.ID != "http.prefix_cache.sync.redis" {
		t.Errorf("CaddyModule().ID = %q, want %q", info.ID, "http.prefix_cache.sync.redis")
	}
	if _, ok := info.New().(edgesync.Transport); !ok {
		t.Errorf("CaddyModule().New() = %T, not an edgesync.Transport", info.New())
	}
	if _, err := caddy.GetModule("http.prefix_cache.sync.redis"); err != nil {
		t.Errorf("GetModule(http.prefix_cache.sync.redis) = %v", err)
	}
}

// TestTwoEdges: a message one edge publishes reaches the other edge, and
// the publisher's own echo reaches the publisher.
func TestTwoEdges(t *testing.T) {
	m := miniredis.RunT(t)
	a := newTransport(t, "a", redisURL(m.Addr()))
	b := newTransport(t, "b", redisURL(m.Addr()))
	if a.conn == b.conn {
		t.Fatal("two edges share one connection")
	}
	inA, inB := subscribe(t, a, 16), subscribe(t, b, 16)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)

	msg := placement(1, 8)
	if !a.Publish(msg) {
		t.Fatalf("Publish while connected = false (status %+v)", a.Status())
	}
	inB.expect(t, msg, deliverWithin)
	inA.expect(t, msg, deliverWithin)

	// The echo can come back before the pipeline's reply is read.
	waitStatus(t, a, "1 published", func(st edgesync.Status) bool { return st.Published+st.Dropped() == 1 }, deliverWithin)
	st := a.Status()
	if st.Published != 1 || st.Dropped() != 0 || !st.Connected || st.Subscribers != 1 {
		t.Errorf("publisher Status() = %+v, want 1 published, none dropped, connected, 1 subscriber", st)
	}
	if st := b.Status(); st.Received != 1 {
		t.Errorf("receiver Status().Received = %d, want 1", st.Received)
	}
}

// TestPublishCopies: the transport keeps no reference to the caller's
// buffer, which the policy reuses for the next message at once.
func TestPublishCopies(t *testing.T) {
	m := miniredis.RunT(t)
	a := newTransport(t, "a", redisURL(m.Addr()))
	in := subscribe(t, a, 16)
	waitConnected(t, a, true, reconnectWithin)
	buf := placement(1, 8)
	want := append([]byte(nil), buf...)
	a.Publish(buf)
	for i := range buf {
		buf[i] = 0xff
	}
	in.expect(t, want, deliverWithin)
}

// TestReloadSharesConnection: a second provision with the same settings,
// as a caddy reload makes before it cleans up the old config, joins the
// first one's connection instead of dialing again; the connection lives
// until the last config lets go.
func TestReloadSharesConnection(t *testing.T) {
	m := miniredis.RunT(t)
	old := newTransport(t, "", redisURL(m.Addr()))
	inOld := subscribe(t, old, 16)
	waitConnected(t, old, true, reconnectWithin)
	// Both connections up: the subscription's, and the publisher's.
	first := placement(0, 8)
	old.Publish(first)
	inOld.expect(t, first, deliverWithin)
	dials := m.TotalConnectionCount()

	cur := newTransport(t, "", redisURL(m.Addr()))
	if cur.conn != old.conn {
		t.Fatal("second provision with the same url and channel made a new connection")
	}
	if n, _ := conns.References(cur.key); n != 2 {
		t.Errorf("References = %d, want 2", n)
	}
	inCur := subscribe(t, cur, 16)
	if !cur.Status().Connected {
		t.Error("joined connection is not connected at once")
	}

	msg := placement(1, 8)
	cur.Publish(msg)
	inOld.expect(t, msg, deliverWithin)
	inCur.expect(t, msg, deliverWithin)

	// The old config goes away; the new one keeps the connection.
	if err := old.Cleanup(); err != nil {
		t.Fatalf("old Cleanup() = %v", err)
	}
	if n, _ := conns.References(cur.key); n != 1 {
		t.Errorf("References after old Cleanup = %d, want 1", n)
	}
	msg = placement(2, 8)
	cur.Publish(msg)
	inCur.expect(t, msg, deliverWithin)
	select {
	case got := <-inOld:
		t.Errorf("cleaned-up config's subscriber got %x", got)
	default:
	}
	if st := cur.Status(); st.Reconnects != 0 || st.Subscribers != 1 || !st.Connected {
		t.Errorf("Status() after reload = %+v, want no reconnect, 1 subscriber, connected", st)
	}
	if n := m.TotalConnectionCount(); n != dials {
		t.Errorf("connections to Redis went from %d to %d over the reload", dials, n)
	}

	// The last one closes it and its goroutines.
	c := cur.conn
	if err := cur.Cleanup(); err != nil {
		t.Fatalf("last Cleanup() = %v", err)
	}
	if _, ok := conns.References(cur.key); ok {
		t.Error("connection still pooled after the last Cleanup")
	}
	if c.ctx.Err() == nil {
		t.Error("connection's goroutines not stopped after the last Cleanup")
	}
	if cur.Publish(msg) {
		t.Error("Publish after the last Cleanup = true")
	}
	if err := cur.Cleanup(); err != nil {
		t.Errorf("second Cleanup() = %v", err)
	}
}

// TestContextDoneReleases: the Caddy context's end releases the
// connection even if nobody calls Cleanup.
func TestContextDoneReleases(t *testing.T) {
	m := miniredis.RunT(t)
	tr := &Transport{URL: redisURL(m.Addr())}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	if err := tr.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	c := tr.conn
	cancel()
	select {
	case <-c.ctx.Done():
	case <-time.After(deliverWithin):
		t.Fatal("connection still running after its only Caddy context ended")
	}
}

func TestFanOutAndCancel(t *testing.T) {
	m := miniredis.RunT(t)
	tr := newTransport(t, "", redisURL(m.Addr()))
	in1, in2 := subscribe(t, tr, 16), make(inbox, 16)
	cancel2 := tr.Subscribe(func(b []byte) { in2 <- append([]byte(nil), b...) })
	waitConnected(t, tr, true, reconnectWithin)
	msg := placement(1, 8)
	tr.Publish(msg)
	in1.expect(t, msg, deliverWithin)
	in2.expect(t, msg, deliverWithin)

	cancel2()
	cancel2() // twice is fine
	if n := tr.Status().Subscribers; n != 1 {
		t.Errorf("Subscribers after cancel = %d, want 1", n)
	}
	msg = placement(2, 8)
	tr.Publish(msg)
	in1.expect(t, msg, deliverWithin)
	select {
	case got := <-in2:
		t.Errorf("cancelled subscriber got %x", got)
	default:
	}
}

// TestSubscriberPanic: a subscriber that panics costs nothing but its own
// message; the others and later messages still arrive.
func TestSubscriberPanic(t *testing.T) {
	m := miniredis.RunT(t)
	tr := newTransport(t, "", redisURL(m.Addr()))
	tr.Subscribe(func([]byte) { panic("subscriber bug") })
	in := subscribe(t, tr, 16)
	waitConnected(t, tr, true, reconnectWithin)
	for i := range 3 {
		msg := placement(i, 8)
		tr.Publish(msg)
		in.expect(t, msg, deliverWithin)
	}
}

// TestHostilePublisher: whatever anyone publishes on the channel reaches
// subscribers as it was sent (the transport does not judge it) and Decode
// refuses each malformed message, except what is larger than any
// placement, which the transport drops and counts; the subscription
// carries on.
func TestHostilePublisher(t *testing.T) {
	m := miniredis.RunT(t)
	testHostile(t, m.Addr())
}

func testHostile(t *testing.T, addr string) {
	tr := newTransport(t, "", redisURL(addr))
	in := subscribe(t, tr, 64)
	waitConnected(t, tr, true, reconnectWithin)

	hostile := goredis.NewClient(&goredis.Options{Addr: addr, Protocol: 2})
	defer hostile.Close()
	valid := placement(1, 8)
	largest := make([]byte, edgesync.MaxMessageSize)
	copy(largest, valid)
	bad := [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		{},
		{'P', 'C', 9},
		valid[:len(valid)-1],
		append(append([]byte(nil), valid...), 0),
		largest,             // as large as a message can be, and malformed
		append(largest, 0),  // larger: dropped unseen
		make([]byte, 8<<20), // 8 MiB: dropped unseen
	}
	for _, b := range bad {
		if err := hostile.Publish(context.Background(), DefaultChannel, b).Err(); err != nil {
			t.Fatalf("hostile PUBLISH: %v", err)
		}
	}
	var msg edgesync.Message
	for i, want := range bad[:6] {
		select {
		case got := <-in:
			if string(got) != string(want) {
				t.Fatalf("hostile message %d arrived as %d bytes, sent %d", i, len(got), len(want))
			}
			if err := msg.Decode(got, edgesync.Limits{}); err == nil {
				t.Errorf("Decode(hostile message %d, %d bytes) = nil, want an error", i, len(got))
			}
		case <-time.After(deliverWithin):
			t.Fatalf("hostile message %d not passed on within %v", i, deliverWithin)
		}
	}
	tr.Publish(valid)
	in.expect(t, valid, deliverWithin)
	if err := msg.Decode(valid, edgesync.Limits{}); err != nil {
		t.Errorf("Decode(valid after hostile) = %v", err)
	}
	if st := tr.Status(); st.Oversized != 2 || st.Received != 7 || !st.Connected {
		t.Errorf("Status() = %+v, want 2 oversized, 7 received, connected", st)
	}
	if tr.Publish(append(largest, 0)) {
		t.Error("Publish(larger than MaxMessageSize) = true")
	}
}

// TestDownAtStart: an unreachable Redis does not fail Provision; Publish
// drops (counted) without blocking, and the transport connects once Redis
// is there.
func TestDownAtStart(t *testing.T) {
	addr := freeAddr(t)
	a := newTransport(t, "a", redisURL(addr))
	b := newTransport(t, "b", redisURL(addr))
	inB := subscribe(t, b, 16)
	if a.Publish(placement(0, 8)) {
		t.Error("Publish with Redis down = true")
	}
	st := a.Status()
	if st.Connected || st.DroppedDisconnected != 1 {
		t.Errorf("Status() with Redis down = %+v, want disconnected, 1 dropped", st)
	}

	waitStatus(t, a, "a reason for not connecting", func(st edgesync.Status) bool { return st.LastError != "" }, reconnectWithin)

	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		t.Fatalf("starting miniredis on %s: %v", addr, err)
	}
	defer m.Close()
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	msg := placement(1, 8)
	a.Publish(msg)
	inB.expect(t, msg, deliverWithin)
	if st := a.Status(); st.Reconnects != 0 || st.LastError == "" {
		t.Errorf("Status() = %+v, want 0 reconnects (first connection) and the last error kept", st)
	}
}

// TestRestart: Redis goes away and comes back; Publish refuses while it
// is gone, the subscription comes back by itself, and messages flow.
func TestRestart(t *testing.T) {
	m := miniredis.RunT(t)
	a := newTransport(t, "a", redisURL(m.Addr()))
	b := newTransport(t, "b", redisURL(m.Addr()))
	inB := subscribe(t, b, 16)
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)

	m.Close()
	waitConnected(t, b, false, reconnectWithin)
	waitConnected(t, a, false, reconnectWithin)
	tightLoop(t, a, 100000)

	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, a, true, reconnectWithin)
	waitConnected(t, b, true, reconnectWithin)
	publishUntilReceived(t, a, inB, placement(1, 8), deliverWithin)
	if st := b.Status(); st.Reconnects != 1 {
		t.Errorf("Status().Reconnects = %d, want 1", st.Reconnects)
	}
}

// tightLoop publishes n messages as fast as it can while Redis is away,
// and checks they were all refused and counted, within a time that only a
// Publish that never waits on the network meets.
func tightLoop(t testing.TB, tr *Transport, n int) {
	t.Helper()
	before := tr.Status()
	msg := placement(0, 8)
	start := time.Now()
	accepted := 0
	for range n {
		if tr.Publish(msg) {
			accepted++
		}
	}
	took := time.Since(start)
	if took > 2*time.Second {
		t.Errorf("%d Publish calls with Redis away took %v", n, took)
	}
	after := tr.Status()
	dropped := after.DroppedFull + after.DroppedDisconnected - before.DroppedFull - before.DroppedDisconnected
	if int(dropped)+accepted != n {
		t.Errorf("%d published with Redis away: %d accepted, %d counted as dropped", n, accepted, dropped)
	}
	// A queue slot comes free only once the publisher has counted its
	// message as published or failed.
	if done := after.Published + after.Failed - before.Published - before.Failed; accepted > after.Buffer+int(done) {
		t.Errorf("%d of %d accepted with Redis away, more than the buffer of %d and the %d the publisher finished", accepted, n, after.Buffer, done)
	}
	t.Logf("%d Publish calls with Redis away: %v (%v each), %d accepted, %d dropped", n, took, took/time.Duration(n), accepted, dropped)
}

// TestBufferFull: when the publisher cannot keep up, Publish drops and
// counts instead of waiting (integration_test.go's TestRealPaused does it
// with a Redis that stops answering).
func TestBufferFull(t *testing.T) {
	m := miniredis.RunT(t)
	tr := newTransport(t, "", redisURL(m.Addr()), withBuffer(4))
	waitConnected(t, tr, true, reconnectWithin)
	// Fill the queue faster than anything can drain it, and check that
	// whatever was not queued was counted.
	n := 10000
	accepted := 0
	for range n {
		if tr.Publish(placement(0, 8)) {
			accepted++
		}
	}
	st := tr.Status()
	if int(st.DroppedFull)+accepted != n || st.DroppedFull == 0 {
		t.Errorf("Status() after %d quick Publish calls into a buffer of 4 = %+v (%d accepted), want the rest dropped as full", n, st, accepted)
	}
}

func TestPublishAllocs(t *testing.T) {
	m := miniredis.RunT(t)
	tr := newTransport(t, "", redisURL(m.Addr()))
	waitConnected(t, tr, true, reconnectWithin)
	msg := placement(0, 128)
	// Grow every slot to the message's size first.
	for range 2 * DefaultBuffer {
		tr.Publish(msg)
	}
	if n := testing.AllocsPerRun(1000, func() { tr.Publish(msg) }); n != 0 {
		t.Errorf("Publish: %v allocs, want 0", n)
	}
}

func TestProvisionErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		tr   *Transport
		want string
	}{
		{"no url", &Transport{}, "url is required"},
		{"bad scheme", &Transport{URL: "http://u:secret@h:1"}, "url scheme must be redis or rediss, got 'http'"},
		{"unparsable", &Transport{URL: "redis://u:secret@h:1/%zz"}, "invalid url"},
		{"bad db", &Transport{URL: "redis://u:secret@h:1/x"}, "invalid url"},
		{"negative buffer", &Transport{URL: "redis://h:1", Buffer: -1}, "buffer must be between 1 and 1048576, got -1"},
		{"huge buffer", &Transport{URL: "redis://h:1", Buffer: MaxBuffer + 1}, "buffer must be between 1 and 1048576, got 1048577"},
		{"negative timeout", &Transport{URL: "redis://h:1", Timeout: -1}, "timeout must be positive"},
		{"empty env", &Transport{URL: "{env.PREFIX_CACHE_TEST_UNSET}"}, "url: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			err := tt.tr.Provision(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Provision(url %q) = %v, want an error containing %q", tt.tr.URL, err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Provision error %q shows the password", err)
			}
			if err := tt.tr.Cleanup(); err != nil {
				t.Errorf("Cleanup() after failed Provision = %v", err)
			}
		})
	}
}

// TestCredentials: the URL's credentials and database reach Redis; no
// password appears in Status, its JSON or the last error.
func TestCredentials(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("s3cret-pw")
	good := newTransport(t, "good", "redis://:s3cret-pw@"+m.Addr()+"/3")
	waitConnected(t, good, true, reconnectWithin)
	wrong := newTransport(t, "wrong", "redis://:wrong-pw@"+m.Addr()+"/3")

	st := good.Status()
	if want := "redis://" + m.Addr() + "/3"; st.Endpoint != want {
		t.Errorf("Status().Endpoint = %q, want %q", st.Endpoint, want)
	}
	// The wrong password never connects, and says why.
	waitStatus(t, wrong, "a last error", func(st edgesync.Status) bool { return st.LastError != "" }, reconnectWithin)
	for _, st := range []edgesync.Status{good.Status(), wrong.Status()} {
		b, _ := json.Marshal(st)
		if strings.Contains(string(b), "s3cret") || strings.Contains(string(b), "wrong-pw") {
			t.Errorf("Status JSON shows a password: %s", b)
		}
	}
	if st := wrong.Status(); st.Connected || st.LastError == "" {
		t.Errorf("Status() with a wrong password = %+v, want disconnected with a reason", st)
	}
}

func TestEnvPlaceholder(t *testing.T) {
	m := miniredis.RunT(t)
	t.Setenv("PREFIX_CACHE_TEST_REDIS_URL", redisURL(m.Addr()))
	t.Setenv("PREFIX_CACHE_TEST_CHANNEL", "from-env")
	tr := newTransport(t, "", "{env.PREFIX_CACHE_TEST_REDIS_URL}", func(tr *Transport) { tr.Channel = "{env.PREFIX_CACHE_TEST_CHANNEL}" })
	waitConnected(t, tr, true, reconnectWithin)
	if st := tr.Status(); st.Channel != "from-env" || !strings.HasPrefix(st.Endpoint, "redis://127.0.0.1:") {
		t.Errorf("Status() = %+v, want the channel and endpoint from the environment", st)
	}
	if tr.URL != "{env.PREFIX_CACHE_TEST_REDIS_URL}" {
		t.Errorf("Provision rewrote URL to %q; the config should keep the placeholder", tr.URL)
	}
}

func TestDefaults(t *testing.T) {
	m := miniredis.RunT(t)
	tr := newTransport(t, "", redisURL(m.Addr()))
	if tr.Channel != DefaultChannel || tr.Buffer != DefaultBuffer || tr.Timeout != DefaultTimeout || tr.DialTimeout != DefaultDialTimeout {
		t.Errorf("after Provision: %+v, want the defaults", tr)
	}
	if st := tr.Status(); st.Buffer != DefaultBuffer || st.Transport != "redis" || st.Channel != DefaultChannel {
		t.Errorf("Status() = %+v", st)
	}
}

func TestBackoff(t *testing.T) {
	c := &conn{minB: minBackoff, maxB: maxBackoff}
	for n := range 10 {
		step := min(minBackoff<<n, maxBackoff)
		for range 100 {
			if d := c.backoff(n); d < step/2 || d > step {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", n, d, step/2, step)
			}
		}
	}
	if d := c.backoff(1000); d > maxBackoff {
		t.Errorf("backoff(1000) = %v, more than %v", d, maxBackoff)
	}
}

// TestUnprovisioned: a transport whose Provision failed or never ran
// refuses quietly rather than panicking.
func TestUnprovisioned(t *testing.T) {
	var tr Transport
	if tr.Publish([]byte("x")) {
		t.Error("Publish on an unprovisioned transport = true")
	}
	tr.Subscribe(func([]byte) {})()
	if st := tr.Status(); st.Connected {
		t.Errorf("Status() = %+v", st)
	}
	if err := tr.Cleanup(); err != nil {
		t.Error(err)
	}
}
