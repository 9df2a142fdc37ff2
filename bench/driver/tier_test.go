package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
	"github.com/prefixcache/caddy-prefixcache/bench/workload"
	"github.com/prefixcache/caddy-prefixcache/edgesync/redis"
)

// TestBenchmarkEdges runs a smoke-sized benchmark through three edges,
// real child processes, in front of real engines: every request is
// served, each edge gets the requests edgeFor gives it, and no child
// outlives the run.
func TestBenchmarkEdges(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three Caddy processes and engines for a few seconds")
	}
	const edges, seed = 3, 7
	w := smallSharedPrefix(t, 48)
	res := benchmarkEdges(t, w, edges, 0, seed, "")
	run := res.Runs[0]
	if res.Edges != edges || run.Edges != edges || run.Sync != "" {
		t.Errorf("result edges %d, run edges %d sync %q, want %d, %d, none", res.Edges, run.Edges, run.Sync, edges, edges)
	}
	want := make([]int, edges)
	for i, c := range w.Conversations {
		for turn := range c.Turns {
			want[edgeFor(seed, i, turn, edges)]++
		}
	}
	if fmt.Sprint(run.EdgeRequests) != fmt.Sprint(want) {
		t.Errorf("requests per edge = %v, want %v (edgeFor with seed %d)", run.EdgeRequests, want, seed)
	}
	for i, n := range run.EdgeRequests {
		if n == 0 {
			t.Errorf("edge %d served no request: %v", i, run.EdgeRequests)
		}
	}
	if run.MaxInFlight == 0 || run.MeanInFlight <= 0 {
		t.Errorf("in-flight max %d mean %v: the engines' /metrics were not sampled", run.MaxInFlight, run.MeanInFlight)
	}
	assertNoChildren(t)
}

// TestBenchmarkEdgesSync is TestBenchmarkEdges with the edges sharing
// placements through a real redis-server.
func TestBenchmarkEdgesSync(t *testing.T) {
	if testing.Short() {
		t.Skip("runs redis-server, two Caddy processes and engines for a few seconds")
	}
	requireRedis(t)
	res := benchmarkEdges(t, smallSharedPrefix(t, 32), 2, 0, 1, SyncRedis)
	run := res.Runs[0]
	if run.Sync != SyncRedis {
		t.Errorf("run sync = %q, want redis", run.Sync)
	}
	// Two placements per routed request at least, and what they weigh.
	if run.SyncPublishes < int64(run.Requests) || run.SyncBytes < 40*run.SyncPublishes {
		t.Errorf("the edges published %d messages, %d bytes, for %d requests: want at least one per request, of 40 bytes or more", run.SyncPublishes, run.SyncBytes, run.Requests)
	}
	assertNoChildren(t)
}

// TestBenchmarkEdgesSent runs two edges and sends every request to the
// first: the second runs idle, and the run says so.
func TestBenchmarkEdgesSent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two Caddy processes and engines for a few seconds")
	}
	w := smallSharedPrefix(t, 24)
	run := benchmarkEdges(t, w, 2, 1, 3, "").Runs[0]
	if run.Edges != 2 || run.EdgesSent != 1 {
		t.Errorf("run edges %d, sent %d, want 2 and 1", run.Edges, run.EdgesSent)
	}
	if want := fmt.Sprint([]int{w.Requests(), 0}); fmt.Sprint(run.EdgeRequests) != want {
		t.Errorf("requests per edge = %v, want %v", run.EdgeRequests, want)
	}
	assertNoChildren(t)
}

func smallSharedPrefix(t *testing.T, requests int) *workload.Workload {
	t.Helper()
	w, err := workload.SharedPrefix{
		Groups: 4, PromptsPerGroup: 3, SystemTokens: 400, QuestionTokens: 50,
		OutputTokens: 8, Requests: requests, Seed: 1,
	}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// benchmarkEdges runs prefix_cache on w through n edges, requests sent
// to the first sent of them (0: all), and checks that every request was
// served.
func benchmarkEdges(t *testing.T, w *workload.Workload, n, sent int, seed uint64, sync string) *Result {
	t.Helper()
	ecfg := engine.DefaultConfig()
	ecfg.KVBlocks = 512
	ecfg.TimeScale = 0.1
	w.Model = ecfg.Model
	policies, err := ParsePolicies("prefix_cache")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Benchmark(ctx, Config{
		Engines: 4, Engine: ecfg, Caddyfile: readCaddyfile(t), Policies: policies,
		QPS: []float64{40}, SampleInterval: 50 * time.Millisecond, NoBound: true,
		Edges: n, EdgesSent: sent, EdgeSeed: seed, Sync: sync,
	}, w)
	if err != nil {
		t.Fatalf("Benchmark with %d edges: %v", n, err)
	}
	run := res.Runs[0]
	if run.Errors > 0 || run.Requests != w.Requests() {
		t.Fatalf("%d edges: %d requests, %d errors (%v), want %d and none", n, run.Requests, run.Errors, run.FirstErrors, w.Requests())
	}
	if run.HitRate <= 0 {
		t.Errorf("%d edges: hit rate %v, want some hits", n, run.HitRate)
	}
	return res
}

// An edge whose reserved port was taken before it could bind it (by
// another process's outgoing connection, say) does not fail the run: the
// tier starts again on other ports.
func TestTierRetriesTakenPort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two Caddy processes")
	}
	taken, err := net.Listen("tcp", ":0") // every interface, as a Caddyfile site binds
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	reservePorts = func(n int) ([]string, error) {
		calls++
		addrs, err := ReservePorts(n)
		if calls == 1 && err == nil {
			addrs[n-1] = fmt.Sprintf("127.0.0.1:%d", port)
		}
		return addrs, err
	}
	defer func() { reservePorts = ReservePorts }()
	policies, err := ParsePolicies("round_robin")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Edges: 2, Engine: engine.DefaultConfig(), Caddyfile: readCaddyfile(t)}
	tr, err := startTier(context.Background(), cfg, []string{"127.0.0.1:1"}, policies[0])
	if err != nil {
		t.Fatalf("startTier with a taken port: %v", err)
	}
	defer tr.stop()
	if calls != 2 {
		t.Errorf("ports reserved %d times, want 2", calls)
	}
	for _, u := range tr.urls {
		if u == fmt.Sprintf("http://127.0.0.1:%d", port) {
			t.Errorf("an edge's URL is the taken port's: %v", tr.urls)
		}
	}
	if len(tr.urls) != 2 || len(tr.edges) != 2 {
		t.Errorf("%d URLs, %d edges, want 2 of each", len(tr.urls), len(tr.edges))
	}
}

func TestEdgeFor(t *testing.T) {
	const n, convs, turns = 4, 500, 4
	counts := make([]int, n)
	split := 0
	for c := range convs {
		first := edgeFor(1, c, 0, n)
		for turn := range turns {
			e := edgeFor(1, c, turn, n)
			if e != edgeFor(1, c, turn, n) {
				t.Fatalf("edgeFor(1, %d, %d, %d) is not deterministic", c, turn, n)
			}
			if e < 0 || e >= n {
				t.Fatalf("edgeFor(1, %d, %d, %d) = %d, out of range", c, turn, n, e)
			}
			counts[e]++
			if e != first {
				split++
				first = -1
			}
		}
	}
	// 2000 draws: each edge gets 500 +- 3 sigma (~58).
	for e, k := range counts {
		if k < 440 || k > 560 {
			t.Errorf("edge %d got %d of %d requests, want about %d", e, k, convs*turns, convs*turns/n)
		}
	}
	// A conversation stays on one edge with probability 1/64.
	if split < convs*9/10 {
		t.Errorf("%d of %d conversations spread over several edges, want most", split, convs)
	}
	if edgeFor(1, 3, 1, n) == edgeFor(2, 3, 1, n) && edgeFor(1, 4, 1, n) == edgeFor(2, 4, 1, n) &&
		edgeFor(1, 5, 1, n) == edgeFor(2, 5, 1, n) && edgeFor(1, 6, 1, n) == edgeFor(2, 6, 1, n) {
		t.Errorf("edgeFor ignores its seed")
	}
	if got := edgeFor(9, 9, 9, 1); got != 0 {
		t.Errorf("edgeFor(n=1) = %d, want 0", got)
	}
}

func TestWithSync(t *testing.T) {
	caddyfile := readCaddyfile(t)
	vars := map[string]string{"LISTEN": "127.0.0.1:9", "UPSTREAMS": "127.0.0.1:1 127.0.0.1:2"}
	const url = "redis://127.0.0.1:6399"
	custom, err := ParseCustomPolicy(`pc={"policy":"prefix_cache","sync":{"channel":"c","url":"redis://other:1"}}`)
	if err != nil {
		t.Fatal(err)
	}
	own, _ := ParsePolicies("prefix_cache,round_robin")
	tests := []struct {
		name  string
		p     Policy
		found int
		want  map[string]any // the sync object of every prefix_cache policy
	}{
		{"the Caddyfile's prefix_cache", own[0], 1, map[string]any{"transport": "redis", "url": url}},
		{"round_robin has nothing to sync", own[1], 0, nil},
		{"a given sync keeps its options", custom, 1, map[string]any{"transport": "redis", "url": "redis://other:1", "channel": "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := AdaptCaddyfile(caddyfile, vars, tt.p, 1)
			if err != nil {
				t.Fatal(err)
			}
			out, found, err := WithSync(raw, SyncRedis, url)
			if err != nil || found != tt.found {
				t.Fatalf("WithSync(%s) found %d, %v; want %d", tt.name, found, err, tt.found)
			}
			var cfg map[string]any
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			var syncs []any
			walk(cfg, func(m map[string]any) {
				if m["policy"] == "prefix_cache" {
					syncs = append(syncs, m["sync"])
				} else if _, ok := m["sync"]; ok {
					t.Errorf("sync set on %v", m)
				}
			})
			if len(syncs) != tt.found {
				t.Fatalf("%d prefix_cache policies, want %d", len(syncs), tt.found)
			}
			for _, s := range syncs {
				if fmt.Sprint(s) != fmt.Sprint(tt.want) {
					t.Errorf("sync = %v, want %v", s, tt.want)
				}
			}
			if tt.found == 0 && !bytes.Equal(out, raw) {
				var a, b any
				json.Unmarshal(out, &a)
				json.Unmarshal(raw, &b)
				if fmt.Sprint(a) != fmt.Sprint(b) {
					t.Errorf("WithSync changed a config with no prefix_cache")
				}
			}
		})
	}
	if _, _, err := WithSync([]byte("{"), SyncRedis, url); err == nil {
		t.Errorf("WithSync(invalid JSON): no error")
	}
}

func TestParseSync(t *testing.T) {
	for in, want := range map[string]string{"": "", "none": "", "redis": "redis"} {
		if got, err := ParseSync(in); err != nil || got != want {
			t.Errorf("ParseSync(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseSync("nats"); err == nil {
		t.Errorf("ParseSync(nats): no error")
	}
}

// The tier waits for subscriptions on the channel the config names, or
// the transport's default.
func TestSyncChannel(t *testing.T) {
	for _, tt := range []struct{ cfg, want string }{
		{`{"handle":[{"load_balancing":{"selection_policy":{"policy":"prefix_cache","sync":{"transport":"redis"}}}}]}`, redis.DefaultChannel},
		{`{"handle":[{"load_balancing":{"selection_policy":{"policy":"prefix_cache","sync":{"channel":"fleet-a"}}}}]}`, "fleet-a"},
		{`{"handle":[{"load_balancing":{"selection_policy":{"policy":"round_robin"}}}]}`, redis.DefaultChannel},
		{`not json`, redis.DefaultChannel},
	} {
		if got := syncChannel([]byte(tt.cfg)); got != tt.want {
			t.Errorf("syncChannel(%s) = %q, want %q", tt.cfg, got, tt.want)
		}
	}
}
