package caddymodule_test

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// Security properties of the policy through a real Caddy: tenants cannot
// influence each other's routing, prompt text never reaches logs, metrics,
// admin responses or placeholders, and no crafted traffic pushes a backend
// over the load bound. docs/threat-model.md states what these protect and
// what they cannot.

// loadConfig replaces the running config with a whole Caddyfile and
// returns a function that stops Caddy (once) before the test ends.
func loadConfig(t *testing.T, caddyfile string) (stop func()) {
	t.Helper()
	if err := caddy.Load(caddyfileJSON(t, caddyfile), true); err != nil {
		t.Fatalf("loading config: %v\n%s", err, caddyfile)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping Caddy: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// sendAs posts body as tenant (the X-Tenant header) and returns the
// backend that answered.
func sendAs(t *testing.T, url, tenant string, body []byte) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant", tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tenant %s: status %d", tenant, resp.StatusCode)
	}
	return resp.Header.Get("X-Backend")
}

// Tenant B's routing decisions are the same whether or not tenant A sent
// traffic first and in between, even when A sends B's exact prompts and
// prompts sharing B's long system prompts: with a tenant key, A's traffic
// creates no index entry B can match. The control run sends A's traffic
// under B's own key and shows the workload does move B's decisions when
// entries are shared, so the equality is not an accident of the workload.
func TestTenantRoutingIndependentOfOtherTenants(t *testing.T) {
	bs := newBackends(t, 4)

	// B runs 8 conversations of 3 turns, each with its own long system
	// prompt (far above min_match).
	var bTurns [][]byte
	var aTraffic [][][]byte // before each of B's turns, A's requests
	for c := range 8 {
		system := words(fmt.Sprintf("tenant-system-%d", c), 300)
		var history []string
		for k := range 3 {
			history = append(history, words(fmt.Sprintf("b-conv%d-user%d", c, k), 40))
			bTurns = append(bTurns, chat(system, history...))
			history = append(history, words(fmt.Sprintf("b-conv%d-assistant%d", c, k), 20))
			// A sends the same system prompt with openings of its own
			// (placed elsewhere by rendezvous hashing), and B's exact
			// request.
			aTraffic = append(aTraffic, [][]byte{
				chat(system, words(fmt.Sprintf("a-conv%d-opening%d", c, k), 40)),
				chat(system, words(fmt.Sprintf("a-conv%d-other%d", c, k), 40), "answer", "more"),
				bTurns[len(bTurns)-1],
			})
		}
	}

	// run starts a fresh Caddy (a fresh index) and returns the backend of
	// each of B's requests; A's traffic, if any, is sent under aTenant.
	run := func(aTenant string) []string {
		p := distinctPorts(t, 3)
		port := p[0]
		stop := loadConfig(t, globalBlock("admin off", t.TempDir(), p[1], p[2])+
			// Load is shared by tenants, on purpose: with the prefill
			// estimate and the cold bound on, B's placements would
			// depend on how much of A's prefill had drained by the
			// wall clock. This test is about the index alone.
			proxySite(port, bs, "", "tenant {http.request.header.X-Tenant}\nprefill_rate off\ncold_load_factor off"))
		defer stop()
		url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
		var got []string
		for i, body := range bTurns {
			if aTenant != "" {
				for _, a := range aTraffic[i] {
					sendAs(t, url, aTenant, a)
				}
			}
			got = append(got, sendAs(t, url, "tenant-B", body))
		}
		return got
	}

	alone := run("")
	withA := run("tenant-A")
	if !slices.Equal(alone, withA) {
		for i := range alone {
			if alone[i] != withA[i] {
				t.Errorf("B's request %d went to %s alone, to %s after tenant A's traffic", i, alone[i], withA[i])
			}
		}
	}
	shared := run("tenant-B")
	if slices.Equal(alone, shared) {
		t.Errorf("control: B's decisions %v did not change when the other traffic was sent under B's own key; the workload cannot tell shared entries from isolated ones", alone)
	}
}

// canary is a string that appears in prompts and nowhere else.
const canary = "CANARY-7f3a9c1e-prompt-text-must-not-leak"

// tenantCanary is the tenant key's value (the Authorization header).
const tenantCanary = "Bearer sk-TENANT-CANARY-5d2b"

// Prompt text and the tenant key never appear in Caddy's logs (default and
// access logs, at DEBUG, with verbose proxy logs and every prefix_cache
// placeholder appended to the access log), in /metrics, in the admin API's
// answers, or in response headers set from the placeholders, whatever the
// body: routed on, malformed, too large, not JSON, or not a POST. The
// positive controls check that the logs did capture the policy's debug
// lines and that the upstreams received the canary.
func TestNoPromptTextInLogsMetricsOrErrors(t *testing.T) {
	bs := newBackends(t, 3)
	dir := t.TempDir()
	caddyLog, accessLog := filepath.Join(dir, "caddy.log"), filepath.Join(dir, "access.log")
	p := distinctPorts(t, 4)
	adminAddr := fmt.Sprintf("127.0.0.1:%d", p[0])
	port := p[1]
	var dials []string
	for _, b := range bs {
		dials = append(dials, b.addr())
	}
	var appends, headers strings.Builder
	for _, p := range []string{"reason", "skip", "dialect", "prompt_bytes", "matched_bytes", "preferred", "upstream", "spilled"} {
		fmt.Fprintf(&appends, "\tlog_append pc_%s {http.reverse_proxy.prefix_cache.%s}\n", p, p)
		fmt.Fprintf(&headers, "\t\theader_down X-PC-%s {http.reverse_proxy.prefix_cache.%s}\n", p, p)
	}
	stop := loadConfig(t, fmt.Sprintf(`{
	admin %s
	persist_config off
	skip_install_trust
	log default {
		output file %s
		format json
		level DEBUG
	}
	storage file_system %s
	http_port %d
	https_port %d
	metrics
}
http://127.0.0.1:%d {
	log {
		output file %s
		format json
		level DEBUG
	}
%s
	reverse_proxy %s {
		lb_policy prefix_cache {
			tenant {http.request.header.Authorization}
			max_body 64KiB
		}
		verbose_logs
%s
	}
}
`, adminAddr, caddyLog, dir, p[2], p[3], port, accessLog, appends.String(), strings.Join(dials, " "), headers.String()))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	admin := "http://" + adminAddr

	long := words(canary, 200)
	routed := map[string][]byte{
		"chat system":   chat(canary+" system "+long, "hello"),
		"chat user":     chat("sys", long),
		"chat tool":     []byte(`{"model":"m","tools":[{"type":"function","function":{"name":"f","description":"` + long + `"}}],"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"q\":\"` + canary + `\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"` + long + `"}]}`),
		"anthropic":     []byte(`{"model":"claude","max_tokens":8,"system":"` + long + `","messages":[{"role":"user","content":[{"type":"text","text":"` + canary + `"}]}]}`),
		"completions":   []byte(`{"model":"m","prompt":"` + long + `"}`),
		"responses":     []byte(`{"model":"m","instructions":"` + long + `","input":"` + canary + `"}`),
		"generate":      []byte(`{"text":"` + long + `","sampling_params":{}}`),
		"image url":     []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/` + canary + `.png"}},{"type":"text","text":"` + long + `"}]}]}`),
		"malformed":     []byte(`{"model":"m","messages":[{"role":"user","content":"` + long),
		"unknown shape": []byte(`{"question":"` + long + `"}`),
		"not json":      []byte(canary + " plain text " + long),
		"too large":     chat("sys", words(canary, 20000)),
		"canary keys":   []byte(`{"model":"m","` + canary + `":1,"messages":[{"role":"user","content":"x"}]}`),
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range routed {
			if !yield(k) {
				return
			}
		}
	})
	var respHeaders strings.Builder
	for round := range 2 { // the second round matches what the first recorded
		for _, name := range names {
			for _, method := range []string{http.MethodPost, http.MethodPut} {
				req, _ := http.NewRequest(method, url, bytes.NewReader(routed[name]))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", tenantCanary)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s (round %d): %v", name, round, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s (round %d): status %d", name, round, resp.StatusCode)
				}
				for k, v := range resp.Header {
					fmt.Fprintf(&respHeaders, "%s: %s\n", k, strings.Join(v, ","))
				}
			}
		}
	}
	// The admin API: its dry run takes a prompt, and must not echo it.
	var adminOut strings.Builder
	for _, name := range names {
		resp, err := http.Post(admin+"/prefix_cache/dry_run", "application/json", bytes.NewReader(routed[name]))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(&adminOut, resp.Body)
		resp.Body.Close()
	}
	for _, path := range []string{"/prefix_cache/stats", "/metrics"} {
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(&adminOut, resp.Body)
		resp.Body.Close()
	}
	stop() // flush and close the log files

	received := 0
	for _, b := range bs {
		received += b.count()
	}
	if received < 2*2*len(routed) {
		t.Fatalf("backends received %d requests, want %d: the canary was not sent", received, 2*2*len(routed))
	}
	logs := map[string]string{"response headers": respHeaders.String(), "admin API and /metrics": adminOut.String()}
	for _, f := range []string{caddyLog, accessLog} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		logs[filepath.Base(f)] = string(b)
	}
	// Positive controls: the debug lines of the policy and of the proxy
	// were captured, and so were the access log's placeholders and the
	// metrics.
	for where, want := range map[string]string{
		"caddy.log":              "prefix_cache selected upstream",
		"access.log":             `"pc_reason":"match"`,
		"admin API and /metrics": "caddy_prefix_cache_",
		"response headers":       "X-Pc-Reason",
	} {
		if !strings.Contains(logs[where], want) {
			t.Errorf("%s has no %q: the test did not capture what it checks", where, want)
		}
	}
	if !strings.Contains(logs["caddy.log"], "upstream roundtrip") {
		t.Errorf("caddy.log has no verbose proxy lines")
	}
	for where, text := range logs {
		for _, secret := range []string{"CANARY-7f3a9c1e", "TENANT-CANARY"} {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("%s contains %q: ...%s...", where, secret, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
}

// bound is the load bound of the README:
// ceil(load_factor x (total in flight + 1) / upstreams) + load_allowance.
func bound(loadFactor float64, allowance, total, n int) int {
	return int(math.Ceil(loadFactor*float64(total+1)/float64(n))) + allowance
}

// An adversary sending many requests that share one long prefix, holding
// every one open, cannot push any backend above the load bound: at each
// selection, the chosen backend's in-flight count plus the new request is
// within ceil(load_factor x (total + 1) / n) + load_allowance. The
// requests are opened one at a time, each once the previous one has
// reached its backend, so Caddy's in-flight counts at each selection are
// exactly the ones the test knows.
func TestAdversaryCannotExceedLoadBound(t *testing.T) {
	const (
		n          = 4
		loadFactor = 1.25
		allowance  = 2
		requests   = 48
	)
	bs := newBackends(t, n)
	type arrival struct{ backend, reason string }
	arrived := make(chan arrival)
	release := make(chan struct{})
	for _, b := range bs {
		b.handle = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			arrived <- arrival{b.name, r.Header.Get("X-PC-Reason")}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return false
		}
	}
	port := startSites(t, 1, func(p []int) string {
		return proxySite(p[0], bs, "header_up X-PC-Reason {http.reverse_proxy.prefix_cache.reason}",
			fmt.Sprintf("load_factor %v\n\t\t\tload_allowance %d", loadFactor, allowance))
	})[0]
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	// The crafted prompts: one long shared prefix; half of them identical,
	// half with a tail of their own, all opening the same conversation.
	prefix := words("adversarial-shared-prefix", 600)
	body := func(i int) []byte {
		if i%2 == 0 {
			return chat(prefix, "same question")
		}
		return chat(prefix, "same question", "answer", words(fmt.Sprintf("tail%d", i), 30))
	}

	errs := make(chan error, requests)
	defer func() {
		close(release)
		for range requests {
			if err := <-errs; err != nil {
				t.Errorf("held request: %v", err)
			}
		}
	}()
	load := map[string]int{}
	reasons := map[string]int{}
	total := 0
	for i := range requests {
		go func() {
			resp, err := http.Post(url, "application/json", bytes.NewReader(body(i)))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("request %d: status %d", i, resp.StatusCode)
				}
			}
			errs <- err
		}()
		a := <-arrived
		b := bound(loadFactor, allowance, total, n)
		if load[a.backend]+1 > b {
			t.Errorf("request %d went to %s carrying %d in flight (loads %v): %d with it, over the bound %d", i, a.backend, load[a.backend], load, load[a.backend]+1, b)
		}
		load[a.backend]++
		reasons[a.reason]++
		total++
	}
	// The prefix's home takes requests up to the bound and spills the
	// rest, so the bound was what kept it there.
	if len(load) < 2 || reasons["spill"] == 0 {
		t.Errorf("loads %v, reasons %v: the shared prefix never spilled, so the bound was never tested", load, reasons)
	}
	t.Logf("in flight %v, reasons %v, final bound %d", load, reasons, bound(loadFactor, allowance, total-1, n))
}
