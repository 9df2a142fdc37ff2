package caddymodule_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/prefixcache/caddy-prefixcache/caddymodule"
)

// scrape returns the value of each sample of Caddy's /metrics whose line
// starts with one of the given series, as "name{labels}" -> value.
func scrape(t *testing.T, admin string, prefixes ...string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				i := strings.LastIndexByte(line, ' ')
				v, err := strconv.ParseFloat(line[i+1:], 64)
				if err != nil {
					t.Fatalf("metric line %q: %v", line, err)
				}
				out[line[:i]] = v
			}
		}
	}
	return out
}

type adminStats struct {
	Instances []struct {
		Instance  uint64 `json:"instance"`
		Entries   int    `json:"entries"`
		Upstreams []struct {
			Dial          string `json:"dial"`
			Owned         int    `json:"owned_entries"`
			InFlightBytes int64  `json:"in_flight_bytes"`
		} `json:"upstreams"`
		Indexed map[string]int `json:"indexed_upstreams"`
	} `json:"instances"`
}

func getStats(t *testing.T, admin string) adminStats {
	t.Helper()
	resp, err := http.Get(admin + "/prefix_cache/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st adminStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("decoding stats: %v", err)
	}
	return st
}

// reload replaces the running config, as `caddy reload` does.
func reload(t *testing.T, admin, sites string) {
	t.Helper()
	var last uint64 // the newest instance number of the running config
	for _, in := range getStats(t, admin).Instances {
		last = max(last, in.Instance)
	}
	cfg := caddyfileJSON(t, globalOptions(t, "admin "+strings.TrimPrefix(admin, "http://"), t.TempDir())+sites)
	resp, err := http.Post(admin+"/load", "application/json", bytes.NewReader(cfg))
	if err != nil {
		t.Fatalf("reloading: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reloading: %d %s", resp.StatusCode, body)
	}
	// The old config's server closes its idle connections; a POST on one
	// of them would fail with EOF and, not being idempotent, not be retried.
	http.DefaultClient.CloseIdleConnections()
	// The old config's policy instances are cleaned up once its servers
	// were told to stop: wait until the stats list only the new config's
	// (numbers never used before).
	deadline := time.Now().Add(10 * time.Second)
	for {
		old := false
		for _, in := range getStats(t, admin).Instances {
			old = old || in.Instance <= last
		}
		if !old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old config's policy instances were still listed 10s after the reload")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
	// Caddy binds each config's listeners anew with SO_REUSEPORT, and
	// stops the old servers on goroutines of their own: until the old
	// socket is closed, the kernel may queue a new connection on it, to
	// be reset when it closes. Wait until each address has one listener.
	for _, addr := range listenAddrs(t, cfg) {
		for caddy.ListenerUsage(addr.Network, addr.JoinHostPort(0)) > 1 {
			if time.Now().After(deadline) {
				t.Fatalf("the old config still listened on %s 10s after the reload", addr)
			}
			time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
		}
	}
}

// listenAddrs returns the addresses a JSON config's HTTP servers listen on.
func listenAddrs(t *testing.T, cfg []byte) []caddy.NetworkAddress {
	t.Helper()
	var c struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string `json:"listen"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	var out []caddy.NetworkAddress
	for _, srv := range c.Apps.HTTP.Servers {
		for _, l := range srv.Listen {
			na, err := caddy.ParseNetworkAddress(l)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, na.Expand()...)
		}
	}
	if len(out) == 0 {
		t.Fatal("the config has no HTTP server that listens")
	}
	return out
}

// Metrics appear, move with traffic, and survive a reload; the index's
// entries do too, so a reload does not cost what the fleet has cached.
func TestMetricsAndIndexSurviveReload(t *testing.T) {
	bs := newBackends(t, 3)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", ""))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	// Counters are process-wide (they survive reloads), so other tests'
	// traffic is in them: compare against a baseline.
	base := scrape(t, admin, "caddy_prefix_cache_")
	system := words("reload-system", 600)
	home, _ := post(t, http.DefaultClient, url, chat(system, "first"))
	post(t, http.DefaultClient, url, chat(system, "second"))
	post(t, http.DefaultClient, url, []byte("not json at all"))

	m := scrape(t, admin, "caddy_prefix_cache_")
	counted := map[string]float64{
		`caddy_prefix_cache_selections_total{reason="cold"}`:      1,
		`caddy_prefix_cache_selections_total{reason="match"}`:     1,
		`caddy_prefix_cache_selections_total{reason="fallback"}`:  1,
		`caddy_prefix_cache_body_peeks_total{outcome="routed"}`:   2,
		`caddy_prefix_cache_body_peeks_total{outcome="not_json"}`: 1,
		`caddy_prefix_cache_matched_fraction_count`:               2,
	}
	for series, want := range counted {
		if got, ok := m[series]; !ok || got-base[series] != want {
			t.Errorf("%s rose by %v (present %v), want %v", series, got-base[series], ok, want)
		}
	}
	gauges := map[string]float64{
		`caddy_prefix_cache_index_capacity`:                                      1 << 20,
		`caddy_prefix_cache_upstream_in_flight{upstream="` + bs[0].addr() + `"}`: 0,
	}
	for series, want := range gauges {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	entries := m["caddy_prefix_cache_index_entries"]
	if entries < 10 || m["caddy_prefix_cache_index_bytes"] <= 0 || m["caddy_prefix_cache_predicted_hit_bytes_total"] <= 0 {
		t.Errorf("index metrics did not move: %v", m)
	}
	var homeDial string
	for _, b := range bs {
		if b.name == home {
			homeDial = b.addr()
		}
	}
	if m[`caddy_prefix_cache_upstream_owned_entries{upstream="`+homeDial+`"}`] != entries {
		t.Errorf("owned entries of %s = %v, want all %v", homeDial, m[`caddy_prefix_cache_upstream_owned_entries{upstream="`+homeDial+`"}`], entries)
	}

	// A reload that keeps the chunking and bound (here: a new allowance)
	// keeps the index and the counters.
	reload(t, admin, proxySite(port, bs, "", "load_allowance 8"))
	after := scrape(t, admin, "caddy_prefix_cache_")
	if got := after["caddy_prefix_cache_index_entries"]; got != entries {
		t.Errorf("index entries after reload = %v, want %v kept", got, entries)
	}
	if series := `caddy_prefix_cache_selections_total{reason="match"}`; after[series] != m[series] {
		t.Errorf("match selections after reload = %v, want %v kept", after[series], m[series])
	}
	// And routing uses what was learned before the reload: a new
	// conversation with the cached system prompt goes where it is cached.
	for i := range 4 {
		if got, _ := post(t, http.DefaultClient, url, chat(system, fmt.Sprintf("after reload %d", i))); got != home {
			t.Errorf("after reload, request %d went to %s, want %s where the prompt is cached", i, got, home)
		}
	}
}

// Placeholders explain each selection, for headers and access logs.
func TestPlaceholders(t *testing.T) {
	bs := newBackends(t, 2)
	port := freePort(t)
	names := []string{"reason", "skip", "dialect", "prompt_bytes", "matched_bytes", "preferred", "upstream", "spilled"}
	var ops []string
	for _, n := range names {
		ops = append(ops, fmt.Sprintf("header_down X-PC-%s {http.reverse_proxy.prefix_cache.%s}", n, n))
	}
	startCaddy(t, proxySite(port, bs, strings.Join(ops, "\n\t\t"), ""))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	get := func(body []byte, contentType string) http.Header {
		resp, err := http.Post(url, contentType, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header
	}
	system := words("placeholder-system", 300)
	first := get(chat(system, "one"), "application/json")
	second := get(chat(system, "one", "answer", "two"), "application/json")
	skipped := get([]byte("<html>"), "text/html")

	addrs := map[string]string{}
	for _, b := range bs {
		addrs[b.name] = b.addr()
	}
	tests := []struct {
		name   string
		header http.Header
		key    string
		want   string
	}{
		{"cold reason", first, "reason", "cold"},
		{"dialect", first, "dialect", "openai_chat"},
		{"cold matched", first, "matched_bytes", "0"},
		{"not spilled", first, "spilled", "false"},
		{"chosen upstream", first, "upstream", addrs[first.Get("X-Backend")]},
		{"preferred", first, "preferred", addrs[first.Get("X-Backend")]},
		{"match reason", second, "reason", "match"},
		{"fallback reason", skipped, "reason", "fallback"},
		{"skip cause", skipped, "skip", "content_type"},
		{"fallback upstream", skipped, "upstream", addrs[skipped.Get("X-Backend")]},
		{"fallback dialect", skipped, "dialect", ""},
		{"routed skip", second, "skip", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.header.Get("X-PC-" + tt.key); got != tt.want {
				t.Errorf("{http.reverse_proxy.prefix_cache.%s} = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
	prompt, _ := strconv.Atoi(second.Get("X-PC-prompt_bytes"))
	matched, _ := strconv.Atoi(second.Get("X-PC-matched_bytes"))
	if prompt <= len(system) || matched < len(system)-256 || matched > prompt {
		t.Errorf("second turn: prompt_bytes %d, matched_bytes %d; want matched to cover the %d-byte system prompt and first turn", prompt, matched, len(system))
	}
}

// The admin API reports, dry-runs without recording, and flushes.
func TestAdminAPI(t *testing.T) {
	bs := newBackends(t, 3)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", ""))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	system := words("admin-system", 600)
	home, _ := post(t, http.DefaultClient, url, chat(system, "first"))
	st := getStats(t, admin)
	if len(st.Instances) != 1 || len(st.Instances[0].Upstreams) != 3 || st.Instances[0].Entries == 0 {
		t.Fatalf("stats = %+v, want one instance with 3 upstreams and entries", st)
	}
	entries := st.Instances[0].Entries

	// A dry run answers like the site would, and records nothing.
	resp, err := http.Post(admin+"/prefix_cache/dry_run", "application/json", bytes.NewReader(chat(system, "dry")))
	if err != nil {
		t.Fatal(err)
	}
	var dry struct {
		Results []struct {
			Routed    bool   `json:"routed"`
			Reason    string `json:"reason"`
			Upstream  string `json:"upstream"`
			ByteBound int64  `json:"byte_bound"`
		} `json:"results"`
	}
	json.NewDecoder(resp.Body).Decode(&dry)
	resp.Body.Close()
	var homeDial string
	for _, b := range bs {
		if b.name == home {
			homeDial = b.addr()
		}
	}
	if len(dry.Results) != 1 || !dry.Results[0].Routed || dry.Results[0].Reason != "match" || dry.Results[0].Upstream != homeDial {
		t.Errorf("dry run = %+v, want a match on %s", dry.Results, homeDial)
	}
	if len(dry.Results) == 1 && dry.Results[0].ByteBound < caddymodule.DefaultLoadAllowanceBytes {
		t.Errorf("dry run byte bound %d, want at least the default allowance %d", dry.Results[0].ByteBound, caddymodule.DefaultLoadAllowanceBytes)
	}
	// A new conversation is cold, and under the cost, the default, the
	// answer shows no cold bound (TestDryRunColdBound: the rules' bound).
	if got := coldDryRun(t, admin); len(got) != 1 || got[0].Reason != "cold" || got[0].ColdBound != 0 {
		t.Errorf("dry run of a new conversation = %+v, want reason cold with no cold bound", got)
	}
	if got := getStats(t, admin).Instances[0].Entries; got != entries {
		t.Errorf("entries after dry run = %d, want %d: a dry run must not record", got, entries)
	}

	// Bad requests get clear errors.
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/prefix_cache/dry_run", http.StatusMethodNotAllowed},
		{http.MethodPost, "/prefix_cache/flush?instance=7000", http.StatusNotFound},
		{http.MethodPost, "/prefix_cache/forget", http.StatusBadRequest},
	} {
		req, _ := http.NewRequest(tt.method, admin+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, tt.want)
		}
	}

	// Flush forgets what was learned.
	resp, err = http.Post(admin+"/prefix_cache/flush", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := getStats(t, admin).Instances[0].Entries; got != 0 {
		t.Errorf("entries after flush = %d, want 0", got)
	}
}

// An upstream removed from the config is forgotten once it has been absent
// for forget_after; the others keep what they hold.
func TestRemovedUpstreamIsForgotten(t *testing.T) {
	bs := newBackends(t, 3)
	port := freePort(t)
	opts := "forget_after 100ms"
	admin := startCaddyAdmin(t, proxySite(port, bs, "", opts))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	for c := range 12 {
		post(t, http.DefaultClient, url, chat("sys", words(fmt.Sprintf("forget%d", c), 200)))
	}
	if got := getStats(t, admin).Instances[0].Indexed; len(got) != 3 {
		t.Fatalf("indexed upstreams = %v, want all 3", got)
	}

	reload(t, admin, proxySite(port, bs[:2], "", opts))
	post(t, http.DefaultClient, url, chat("sys", "after reload")) // the new config's pool is now known
	gone := bs[2].addr()
	deadline := time.Now().Add(10 * time.Second)
	for {
		indexed := getStats(t, admin).Instances[0].Indexed
		if _, ok := indexed[gone]; !ok {
			if len(indexed) != 2 {
				t.Errorf("indexed upstreams = %v, want the 2 that remain", indexed)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still indexed 10s after it left the config: %v", gone, indexed)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

// Instances keep their number across a reload's overlap: the old config's
// number is gone afterwards (404, not another instance), the new one has
// a number never used before, and stats name every option.
func TestAdminInstanceNumbersAreStable(t *testing.T) {
	bs := newBackends(t, 2)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", ""))
	before := getStats(t, admin).Instances[0].Instance
	reload(t, admin, proxySite(port, bs, "", "load_allowance 8"))
	after := getStats(t, admin).Instances
	if len(after) != 1 || after[0].Instance == before {
		t.Fatalf("after a reload: instances %+v, want one with a new number (was %d)", after, before)
	}
	for _, tt := range []struct {
		instance uint64
		want     int
	}{{before, http.StatusNotFound}, {after[0].Instance, http.StatusOK}} {
		resp, err := http.Post(fmt.Sprintf("%s/prefix_cache/flush?instance=%d", admin, tt.instance), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("flush?instance=%d = %d, want %d", tt.instance, resp.StatusCode, tt.want)
		}
	}
	resp, err := http.Get(admin + "/prefix_cache/stats")
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Instances []map[string]any `json:"instances"`
	}
	json.NewDecoder(resp.Body).Decode(&raw)
	resp.Body.Close()
	for _, key := range []string{"cold_load_factor", "tenant", "tenant_share", "allow_empty_tenant", "fallback", "forget_after", "max_body", "body_budget", "max_chunks", "prefill_rate", "body_kept_for_retries"} {
		if _, ok := raw.Instances[0][key]; !ok {
			t.Errorf("stats has no %q", key)
		}
	}
	if got := raw.Instances[0]["fallback"]; got != "least_conn" {
		t.Errorf("stats fallback = %v, want least_conn", got)
	}
}

// A dry run changes nothing, not even the upstreams' IDs, and refuses a
// body larger than it reads instead of routing on its first 64 MiB.
func TestAdminDryRunChangesNothing(t *testing.T) {
	bs := newBackends(t, 2)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", ""))
	// A request the policy does not route on: the pool is known, no
	// upstream interned.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/models", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Post(admin+"/prefix_cache/dry_run", "application/json", bytes.NewReader(chat("sys", "dry")))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := getStats(t, admin).Instances[0].Indexed; len(got) != 0 {
		t.Errorf("after a dry run, indexed upstreams = %v, want none", got)
	}
	big := io.MultiReader(strings.NewReader(`{"model":"m","prompt":"`), io.LimitReader(zeros{}, 64<<20), strings.NewReader(`"}`))
	resp, err = http.Post(admin+"/prefix_cache/dry_run", "application/json", big)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("dry run of a body over 64 MiB = %d, want 413", resp.StatusCode)
	}
}

// zeros reads as endless '0' bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// /prefix_cache/forget forgets one upstream: its entries go, the others
// keep theirs.
func TestAdminForgetOneUpstream(t *testing.T) {
	bs := newBackends(t, 3)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", ""))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	for c := range 12 {
		post(t, http.DefaultClient, url, chat("sys", words(fmt.Sprintf("forget-one%d", c), 200)))
	}
	indexed := getStats(t, admin).Instances[0].Indexed
	if len(indexed) != 3 {
		t.Fatalf("indexed = %v, want 3 upstreams", indexed)
	}
	gone := bs[0].addr()
	resp, err := http.Post(admin+"/prefix_cache/forget?upstream="+gone, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Forgotten int `json:"forgotten_entries"`
	}
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if out.Forgotten != indexed[gone] {
		t.Errorf("forgotten_entries = %d, want the %d it owned", out.Forgotten, indexed[gone])
	}
	after := getStats(t, admin).Instances[0].Indexed
	if _, ok := after[gone]; ok || len(after) != 2 {
		t.Errorf("after forgetting %s: indexed = %v, want the other 2", gone, after)
	}
	for _, b := range bs[1:] {
		if after[b.addr()] != indexed[b.addr()] {
			t.Errorf("%s owns %d entries after another was forgotten, want %d", b.addr(), after[b.addr()], indexed[b.addr()])
		}
	}
	// An upstream no instance routes to or remembers is a typo: 404,
	// not 200 with nothing forgotten. One still in the pool that owns
	// nothing now is forgotten again, with 0 entries.
	for dial, want := range map[string]int{"10.255.0.1:8000": http.StatusNotFound, gone: http.StatusOK} {
		resp, err := http.Post(admin+"/prefix_cache/forget?upstream="+dial, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("forget %s: status %d (%s), want %d", dial, resp.StatusCode, bytes.TrimSpace(body), want)
		}
	}
}

// caddy_prefix_cache_index_evictions_total is a counter: it never goes
// down, also when a reload drops an index that had evicted.
func TestEvictionsNeverGoDown(t *testing.T) {
	bs := newBackends(t, 2)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", "max_entries 64"))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	for c := range 8 {
		post(t, http.DefaultClient, url, chat(words(fmt.Sprintf("evict%d", c), 400), "hi"))
	}
	const key = "caddy_prefix_cache_index_evictions_total"
	before := scrape(t, admin, key)[key]
	if before == 0 {
		t.Fatal("no evictions: the test did not fill its index")
	}
	reload(t, admin, proxySite(port, bs, "", "max_entries 128")) // another shape: the old index is dropped
	if after := scrape(t, admin, key)[key]; after < before {
		t.Errorf("%s went from %v to %v across a reload", key, before, after)
	}
}

// The placeholders reach the access log through log_append, for routed
// and fallback requests alike.
func TestPlaceholdersInAccessLog(t *testing.T) {
	bs := newBackends(t, 2)
	port := freePort(t)
	logFile := filepath.Join(t.TempDir(), "access.log")
	startCaddy(t, fmt.Sprintf(`http://127.0.0.1:%d {
	reverse_proxy %s %s {
		lb_policy prefix_cache
	}
	log_append prefix_cache_reason {http.reverse_proxy.prefix_cache.reason}
	log_append prefix_cache_upstream {http.reverse_proxy.prefix_cache.upstream}
	log_append prefix_cache_skip {http.reverse_proxy.prefix_cache.skip}
	log {
		output file %s
		format json
	}
}
`, port, bs[0].addr(), bs[1].addr(), logFile))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	post(t, http.DefaultClient, url, chat("sys", "routed"))
	resp, err := http.Post(url, "text/html", strings.NewReader("<html>"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var lines []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for len(lines) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("access log has %d lines, want 2", len(lines))
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, bounded by the deadline
		data, _ := os.ReadFile(logFile)
		lines = nil
		for _, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(l, &m) == nil {
				lines = append(lines, m)
			}
		}
	}
	dials := map[string]bool{bs[0].addr(): true, bs[1].addr(): true}
	for i, want := range []struct{ reason, skip string }{{"cold", ""}, {"fallback", "content_type"}} {
		l := lines[i]
		if l["prefix_cache_reason"] != want.reason || l["prefix_cache_skip"] != want.skip || !dials[fmt.Sprint(l["prefix_cache_upstream"])] {
			t.Errorf("access log line %d: reason %v, skip %v, upstream %v; want %s, %q and a backend", i, l["prefix_cache_reason"], l["prefix_cache_skip"], l["prefix_cache_upstream"], want.reason, want.skip)
		}
	}
}

// The admin stats name each instance's server and the config path of
// its reverse_proxy, which the admin API's config endpoint resolves to
// that handler.
func TestStatsNameServerAndRoute(t *testing.T) {
	b := newBackend(t, "a")
	port := freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	handle /v1/* {
		reverse_proxy %s {
			lb_policy prefix_cache
		}
	}
	respond 404
}
`, port, b.addr()))
	resp, err := http.Get(admin + "/prefix_cache/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Instances []struct{ Server, Route string } `json:"instances"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Instances) != 1 {
		t.Fatalf("stats: %v, %d instances, want 1", err, len(st.Instances))
	}
	in := st.Instances[0]
	if in.Server == "" || !strings.HasPrefix(in.Route, "/routes/") {
		t.Fatalf("stats name server %q, route %q; want both", in.Server, in.Route)
	}
	resp, err = http.Get(admin + "/config/apps/http/servers/" + in.Server + in.Route)
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Handler       string `json:"handler"`
		LoadBalancing struct {
			SelectionPolicy struct{ Policy string } `json:"selection_policy"`
		} `json:"load_balancing"`
	}
	err = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if err != nil || h.Handler != "reverse_proxy" || h.LoadBalancing.SelectionPolicy.Policy != "prefix_cache" {
		t.Errorf("config at %s%s: %+v (%v), want the prefix_cache reverse_proxy", in.Server, in.Route, h, err)
	}
}

// TestDryRunColdBound: with choice rules, the dry run of a new
// conversation shows the cold bound it was placed under (at least 1 in
// flight), once the upstreams have been routed to (TestAdminAPI: none
// under the cost, which reads no cold bound).
func TestDryRunColdBound(t *testing.T) {
	bs := newBackends(t, 2)
	port := freePort(t)
	admin := startCaddyAdmin(t, proxySite(port, bs, "", "choice rules"))
	post(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), chat(words("a system", 200), "first"))
	if got := coldDryRun(t, admin); len(got) != 1 || got[0].Reason != "cold" || got[0].ColdBound < 1 {
		t.Errorf("dry run of a new conversation = %+v, want reason cold with a cold bound", got)
	}
}

// coldDryRun asks admin's dry run where a new conversation would go.
func coldDryRun(t *testing.T, admin string) []coldDryResult {
	t.Helper()
	resp, err := http.Post(admin+"/prefix_cache/dry_run", "application/json", bytes.NewReader(chat(words("another system", 200), "dry")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var dry struct {
		Results []coldDryResult `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&dry); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	return dry.Results
}

// coldDryResult is what TestAdminAPI and TestDryRunColdBound read of a
// dry run's result.
type coldDryResult struct {
	Reason    string `json:"reason"`
	ColdBound int    `json:"cold_bound"`
}
