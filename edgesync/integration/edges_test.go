package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
	_ "github.com/prefixcache/caddy-prefixcache/caddymodule"
	"github.com/prefixcache/caddy-prefixcache/edgesync"
	_ "github.com/prefixcache/caddy-prefixcache/edgesync/redis"
)

func TestMain(m *testing.M) {
	driver.ServeEdgeIfChild() // the edges are this binary, re-executed
	os.Exit(m.Run())
}

// needRedis skips the test without redis-server, unless CI requires it.
func needRedis(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %s", driver.RedisNotFound)
		}
		t.Skipf("skipped: several edges sharing placements need a real redis-server (%s)", driver.RedisNotFound)
	}
}

// backend answers chat completions with its name; a request with X-Hold
// is answered only once hold is closed.
type backend struct {
	name string
	srv  *httptest.Server
	hold chan struct{}
}

func newBackends(t *testing.T, n int) []*backend {
	var bs []*backend
	for i := range n {
		b := &backend{name: fmt.Sprintf("b%d", i), hold: make(chan struct{})}
		b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if r.Header.Get("X-Hold") != "" {
				<-b.hold
			}
			w.Header().Set("X-Backend", b.name)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"message":{"content":"ok"}}]}`)
		}))
		t.Cleanup(b.srv.Close)
		t.Cleanup(func() {
			select {
			case <-b.hold:
			default:
				close(b.hold)
			}
		})
		bs = append(bs, b)
	}
	return bs
}

// handedOut holds the ports freePort returned, so that no two of one
// test's listeners (a site and Caddy's https_port, say) get the same
// one: the kernel may hand out a port again once it is closed.
var handedOut sync.Map

// freePort returns a loopback port that was free a moment ago and that
// no earlier call returned.
func freePort(t *testing.T) int {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if _, seen := handedOut.LoadOrStore(port, true); !seen {
			return port
		}
	}
}

// edge is one Caddy process of the tier.
type edge struct {
	url, admin string
}

// startTier starts n edges with the same site (policy options opts) over
// bs, syncing through redisURL, and returns them.
func startTier(t *testing.T, n int, bs []*backend, redisURL, opts string) []edge {
	t.Helper()
	var dials []string
	for _, b := range bs {
		dials = append(dials, b.srv.Listener.Addr().String())
	}
	var cfgs [][]byte
	var listens []string
	var edges []edge
	for range n {
		site, admin := freePort(t), freePort(t)
		cf := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	skip_install_trust
	log default {
		output discard
	}
	storage file_system %s
	http_port %d
	https_port %d
}
http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy prefix_cache {
			sync redis %s
			%s
		}
		header_down X-PC-Reason {http.reverse_proxy.prefix_cache.reason}
		header_down X-PC-Preferred {http.reverse_proxy.prefix_cache.preferred}
	}
}
`, admin, t.TempDir(), freePort(t), freePort(t), site, strings.Join(dials, " "), redisURL, opts)
		js, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), map[string]any{"filename": "Caddyfile"})
		if err != nil {
			t.Fatalf("adapting: %v\n%s", err, cf)
		}
		cfgs = append(cfgs, js)
		listens = append(listens, fmt.Sprintf("127.0.0.1:%d", site))
		edges = append(edges, edge{url: fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", site), admin: fmt.Sprintf("http://127.0.0.1:%d", admin)})
	}
	procs, err := driver.StartEdges(context.Background(), cfgs, listens)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { driver.StopEdges(procs) })
	return edges
}

func startRedis(t *testing.T) *driver.Redis {
	t.Helper()
	needRedis(t)
	r, err := driver.StartRedis(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	return r
}

func chat(system string, turns ...string) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []msg{{"system", system}}
	for i, t := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, t})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	return b
}

func words(seed string, n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "%s-%d ", seed, i)
	}
	return sb.String()
}

// send posts body with auth (if any) and returns the status, backend and
// routing reason.
func send(t *testing.T, url, auth string, body []byte) (int, string, string) {
	t.Helper()
	code, h := post(t, url, auth, body)
	return code, h.Get("X-Backend"), h.Get("X-PC-Reason")
}

// post posts body with auth (if any), reads the answer, and returns its
// status and headers.
func post(t *testing.T, url, auth string, body []byte) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// syncStats is what an edge's admin API says of its sync.
type syncStats struct {
	Entries int            `json:"entries"`
	Indexed map[string]int `json:"indexed_upstreams"`
	Sync    struct {
		Connected        bool              `json:"connected"`
		AppliedPlaced    uint64            `json:"applied_placed"`
		AppliedConfirmed uint64            `json:"applied_confirmed"`
		TierEdges        int               `json:"tier_edges"`
		Rejected         map[string]uint64 `json:"rejected"`
		CatchUpRequests  uint64            `json:"catch_up_requests"`
		CatchUpSent      uint64            `json:"catch_up_sent"`
	} `json:"sync"`
}

func stats(t *testing.T, e edge) syncStats {
	t.Helper()
	resp, err := http.Get(e.admin + "/prefix_cache/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Instances []syncStats `json:"instances"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Instances) != 1 {
		t.Fatalf("stats: %v, %d instances", err, len(st.Instances))
	}
	return st.Instances[0]
}

// waitFor polls cond until it holds, or fails after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition, bounded by the deadline
	}
	return time.Since(start)
}

// A placement made on one edge is followed by another within a second:
// the conversation's next turn, sent to the other edge, is a match on the
// same upstream, and so is the first turn of a conversation sharing its
// long system prompt.
func TestPlacementFollowedAcrossEdges(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 4)
	edges := startTier(t, 2, bs, r.URL(), "")
	a, b := edges[0], edges[1]
	waitFor(t, 10*time.Second, "both edges connected", func() bool { return stats(t, a).Sync.Connected && stats(t, b).Sync.Connected })

	system := words("shared-system", 600)
	for c := range 6 {
		turn := fmt.Sprintf("conversation %d", c)
		before := stats(t, b).Sync
		_, home, reason := send(t, a.url, "", chat(system, turn))
		if reason != "cold" && reason != "match" {
			t.Fatalf("conversation %d, first turn on edge A: %q", c, reason)
		}
		lag := waitFor(t, time.Second, "edge B applies edge A's placement and its confirmation", func() bool {
			st := stats(t, b).Sync
			return st.AppliedPlaced > before.AppliedPlaced && st.AppliedConfirmed > before.AppliedConfirmed
		})
		t.Logf("conversation %d: edge B had applied edge A's placement and confirmation %v after A answered", c, lag.Round(time.Millisecond))
		_, got, reason := send(t, b.url, "", chat(system, turn, "answer", "next"))
		if got != home || reason != "match" {
			t.Errorf("conversation %d, second turn on edge B: %s (%s), want a match on %s", c, got, reason, home)
		}
	}
}

// Redis stopped mid-run loses no request: every request is served while
// it is down, and once it is back the edges share again.
func TestRedisDownLosesNothing(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 3)
	edges := startTier(t, 2, bs, r.URL(), "")
	waitFor(t, 10*time.Second, "both edges connected", func() bool { return stats(t, edges[0]).Sync.Connected && stats(t, edges[1]).Sync.Connected })
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed, served := 0, 0
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return served
	}
	stop := make(chan struct{})
	for i := range edges {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Post(edges[i].url, "application/json", bytes.NewReader(chat(words(fmt.Sprintf("edge %d request %d", i, n), 100), "hi")))
				code := 0
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				served++
				if code != http.StatusOK {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	waitFor(t, 10*time.Second, "edge A applies placements of edge B", func() bool { return stats(t, edges[0]).Sync.AppliedPlaced > 0 })
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the edges notice Redis is gone", func() bool { return !stats(t, edges[0]).Sync.Connected })
	down := count()
	waitFor(t, 10*time.Second, "50 requests served while Redis is down", func() bool { return count() >= down+50 })
	if err := r.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the edges reconnect", func() bool { return stats(t, edges[0]).Sync.Connected && stats(t, edges[1]).Sync.Connected })
	close(stop)
	wg.Wait()
	if failed > 0 {
		t.Errorf("%d of %d requests failed while Redis was up, down and back", failed, served)
	}
	// Sharing works again.
	before := stats(t, edges[1]).Sync.AppliedConfirmed
	send(t, edges[0].url, "", chat(words("after", 300), "x"))
	waitFor(t, 5*time.Second, "edge B applies a placement after Redis came back", func() bool { return stats(t, edges[1]).Sync.AppliedConfirmed > before })
}

// publish sends msgs on the channel as any Redis client could, speaking
// RESP directly.
func publish(t *testing.T, addr string, msgs ...[]byte) {
	t.Helper()
	if err := publishTo(addr, msgs...); err != nil {
		t.Fatal(err)
	}
}

// publishTo is publish for a goroutine, which must not call t.Fatal.
func publishTo(addr string, msgs ...[]byte) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	w := bufio.NewWriter(conn)
	for _, m := range msgs {
		fmt.Fprintf(w, "*3\r\n$7\r\nPUBLISH\r\n$%d\r\ncaddy-prefix-cache\r\n$%d\r\n", len("caddy-prefix-cache"), len(m))
		w.Write(m)
		w.WriteString("\r\n")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	br := bufio.NewReader(conn)
	for range msgs {
		if _, err := br.ReadString('\n'); err != nil {
			return err
		}
	}
	return nil
}

// A hostile publisher on the channel cannot crash an edge, intern a name,
// or grow the index past max_entries: garbage is rejected as malformed,
// placements naming upstreams outside the pool are rejected, and a flood
// of valid placements with unique hashes stays within the bound, while
// every request is served.
func TestHostilePublisher(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 2)
	edges := startTier(t, 1, bs, r.URL(), "max_entries 4096")
	e := edges[0]
	waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, e).Sync.Connected })
	garbage := [][]byte{[]byte("hello"), {}, bytes.Repeat([]byte{0xff}, 1000), []byte("PC\x01\x01truncated")}
	stranger := edgesync.Message{Origin: 7, Kind: edgesync.Placed, ChunkSize: 256, Upstream: "203.0.113.9:8000", Hashes: []uint64{1, 2, 3}}
	var msgs [][]byte
	msgs = append(msgs, garbage...)
	msgs = append(msgs, stranger.AppendBinary(nil))
	for i := range 200 { // 200 x 2048 unique hashes: 100 times the index
		hashes := make([]uint64, 2048)
		for j := range hashes {
			hashes[j] = binary.LittleEndian.Uint64([]byte(fmt.Sprintf("%04d%04d", i, j)))
		}
		m := edgesync.Message{Origin: 7, Kind: edgesync.Confirmed, ChunkSize: 256, Upstream: bs[0].srv.Listener.Addr().String(), Hashes: hashes}
		msgs = append(msgs, m.AppendBinary(nil))
	}
	publish(t, r.Addr, msgs...)
	waitFor(t, 10*time.Second, "the flood is applied", func() bool { return stats(t, e).Sync.AppliedConfirmed == 200 })
	st := stats(t, e)
	if st.Sync.Rejected["malformed"] != uint64(len(garbage)) || st.Sync.Rejected["unknown_upstream"] != 1 {
		t.Errorf("rejected %v, want %d malformed and 1 unknown_upstream", st.Sync.Rejected, len(garbage))
	}
	if st.Entries > 4096 {
		t.Errorf("%d entries after the flood, more than max_entries 4096", st.Entries)
	}
	if code, _, _ := send(t, e.url, "", chat("sys", "still serving")); code != http.StatusOK {
		t.Errorf("after the flood: %d", code)
	}
}

// Tenants stay apart across edges: a conversation tenant a placed on edge
// A is a match for tenant a on edge B, and not for tenant b sending the
// very same prompt there.
func TestTenantsStayApartAcrossEdges(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 4)
	edges := startTier(t, 2, bs, r.URL(), "tenant {http.request.header.Authorization}")
	a, b := edges[0], edges[1]
	waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, a).Sync.Connected && stats(t, b).Sync.Connected })
	system := words("tenant-system", 600)
	before := stats(t, b).Sync.AppliedConfirmed
	_, home, _ := send(t, a.url, "Bearer a", chat(system, "q"))
	waitFor(t, time.Second, "edge B applies", func() bool { return stats(t, b).Sync.AppliedConfirmed > before })
	if _, _, reason := send(t, b.url, "Bearer b", chat(system, "q", "a", "q2")); reason == "match" {
		t.Errorf("tenant b on edge B matched tenant a's prompt")
	}
	if _, got, reason := send(t, b.url, "Bearer a", chat(system, "q", "a", "q2")); reason != "match" || got != home {
		t.Errorf("tenant a on edge B: %s (%s), want a match on %s", got, reason, home)
	}
}

// upstreamStats is what an edge's admin API says of one upstream.
type upstreamStats struct {
	Dial           string `json:"dial"`
	InFlight       int    `json:"in_flight"`
	RemoteInFlight int    `json:"remote_in_flight"`
	Counted        int    `json:"remote_in_flight_counted"`
	PrefillBacklog int64  `json:"prefill_backlog_bytes"`
}

func upstreams(t *testing.T, e edge) map[string]upstreamStats {
	t.Helper()
	resp, err := http.Get(e.admin + "/prefix_cache/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Instances []struct {
			Upstreams []upstreamStats `json:"upstreams"`
		} `json:"instances"`
	}
	json.NewDecoder(resp.Body).Decode(&st)
	out := map[string]upstreamStats{}
	for _, u := range st.Instances[0].Upstreams {
		out[u.Dial] = u
	}
	return out
}

// The load bound holds for the tier: requests one edge holds in flight at
// a replica count on another edge, which then spills a request it would
// otherwise have sent there; once they end, the other edge matches again.
func TestLoadBoundHoldsAcrossEdges(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 2)
	edges := startTier(t, 2, bs, r.URL(), "load_allowance 0\n\t\t\tload_allowance_bytes off\n\t\t\tcold_load_factor off\n\t\t\tprefill_rate off")
	a, b := edges[0], edges[1]
	waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, a).Sync.Connected && stats(t, b).Sync.Connected })
	send(t, b.url, "", chat("another", "so that edge B lists its pool in stats"))
	system := words("busy-system", 600)
	_, home, _ := send(t, a.url, "", chat(system, "first"))
	dial := dialOf(bs, home)
	// Edge B reported its request in flight as it placed it: wait for the
	// report that it ended, so that edge A's bound counts A's own alone.
	waitFor(t, 5*time.Second, "edge A hears edge B's request end", func() bool {
		if stats(t, a).Sync.TierEdges != 1 {
			return false
		}
		for _, u := range upstreams(t, a) {
			if u.RemoteInFlight != 0 {
				return false
			}
		}
		return true
	})
	// Two requests held at home through edge A: its bound at two replicas
	// with no allowance, ceil(1.25 x 3 / 2) = 2, is full.
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { hold(a.url, chat(system, "first", "x", fmt.Sprintf("held %d", i))) })
	}
	waitFor(t, 5*time.Second, "edge A holds two requests at home", func() bool { return upstreams(t, a)[dial].InFlight == 2 })
	lag := waitFor(t, 5*time.Second, "edge B sees them", func() bool { return upstreams(t, b)[dial].RemoteInFlight == 2 })
	t.Logf("edge B saw edge A's two requests in flight %v after they were", lag.Round(time.Millisecond))
	if _, got, reason := send(t, b.url, "", chat(system, "first", "y", "via B")); reason == "match" || got == home {
		t.Errorf("edge B, with the tier's bound full at %s: %s (%s), want a spill elsewhere", home, got, reason)
	}
	for _, x := range bs {
		close(x.hold)
	}
	wg.Wait()
	waitFor(t, 5*time.Second, "edge B sees them end", func() bool { return upstreams(t, b)[dial].RemoteInFlight == 0 })
	if _, got, reason := send(t, b.url, "", chat(system, "first", "y", "via B again")); reason != "match" || got != home {
		t.Errorf("edge B once the tier is idle: %s (%s), want a match on %s", got, reason, home)
	}
}

// Cold placement counts the tier's prefill backlog: a long prompt held in
// flight through edge A is queued prefill at its replica on edge B too,
// so edge B places the new conversations whose rendezvous winner is that
// replica elsewhere, by the backlog, rather than behind it.
func TestColdPlacementCountsTierBacklog(t *testing.T) {
	r := startRedis(t)
	bs := newBackends(t, 4)
	// Only the backlog moves cold requests: no cold bound, and ~20 KB
	// queued at 1 KiB/s drains in ~20 s, far longer than the test.
	edges := startTier(t, 2, bs, r.URL(), "cold_load_factor off\n\t\t\tprefill_rate 1KiB")
	a, b := edges[0], edges[1]
	waitFor(t, 10*time.Second, "connected", func() bool { return stats(t, a).Sync.Connected && stats(t, b).Sync.Connected })
	send(t, b.url, "", chat("another", "so that edge B lists its pool in stats"))
	// Edge A reports once it has a pool; its first report is edge B's
	// baseline of what A has sent each upstream.
	send(t, a.url, "", chat("warm-up", "so that edge A reports"))
	waitFor(t, 5*time.Second, "edge B hears edge A", func() bool { return stats(t, b).Sync.TierEdges == 1 })

	var wg sync.WaitGroup
	wg.Go(func() { hold(a.url, chat(words("long held prompt", 1300), "hold")) })
	defer func() {
		for _, x := range bs {
			close(x.hold)
		}
		wg.Wait()
	}()
	var busy string
	waitFor(t, 5*time.Second, "edge A holds the long prompt", func() bool {
		for dial, u := range upstreams(t, a) {
			if u.InFlight == 1 {
				busy = dial
				return true
			}
		}
		return false
	})
	waitFor(t, 5*time.Second, "edge B queues its prefill", func() bool { return upstreams(t, b)[busy].PrefillBacklog > 10000 })

	moved := 0
	for i := 0; i < 200 && moved < 3; i++ {
		_, h := post(t, b.url, "", chat(words(fmt.Sprintf("conversation %d", i), 100), "hello"))
		if h.Get("X-PC-Preferred") != busy {
			continue
		}
		moved++
		reason, got := h.Get("X-PC-Reason"), h.Get("X-Backend")
		if reason != "prefill" || dialOf(bs, got) == busy {
			t.Errorf("conversation %d through edge B: %s on %s, want prefill away from %s, busy through edge A", i, reason, got, busy)
		}
	}
	if moved < 3 {
		t.Fatalf("only %d new conversations preferred %s", moved, busy)
	}
}

// hold posts body with X-Hold, which a backend answers once its hold is
// closed, and reads the answer; for a goroutine, so it fails nothing.
func hold(url string, body []byte) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hold", "1")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// dialOf returns the address of the backend named name.
func dialOf(bs []*backend, name string) string {
	for _, x := range bs {
		if x.name == name {
			return x.srv.Listener.Addr().String()
		}
	}
	return ""
}
