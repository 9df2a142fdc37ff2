package caddymodule

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	dto "github.com/prometheus/client_model/go"
)

// A reload cancels the scrapes of the config it replaces: that is not the
// engine failing, so it is neither counted as an outcome nor logged, and a
// new config's first good scrape of an upstream is no change to log.
func TestReloadScrapesQuiet(t *testing.T) {
	var holding atomic.Bool
	holding.Store(true)
	held := make(chan struct{}, 16)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			fmt.Fprint(w, `{}`)
			return
		}
		if holding.Load() {
			held <- struct{}{}
			<-r.Context().Done() // until the reload cancels the scrape
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 0\n"+
			"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0\n")
	}))
	t.Cleanup(backend.Close)
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	site := loopbackAddr(t)
	logging := fmt.Sprintf(`{"level": "INFO", "writer": {"output": "file", "filename": %q}, "encoder": {"format": "json"}}`, logFile)
	cfg := func(i int) []byte {
		return reloadingConfig(i, adminOff, logging, site, backend.Listener.Addr().String(),
			`"max_entries": 7013, "engine_metrics": {"interval": "5s", "timeout": "5s"}`)
	}
	before := scrapeCounts(t)
	request := func() { postAcrossReloads(t, site) }
	if err := caddy.Load(cfg(0), true); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = caddy.Stop()
		}
	})
	const reloads = 5
	for i := 1; i <= reloads; i++ {
		request() // the first Select starts the scrapes
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Fatalf("reload %d: no scrape reached the engine", i)
		}
		if err := caddy.Load(cfg(i), true); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	holding.Store(false)
	request()
	deadline := time.Now().Add(10 * time.Second)
	for scrapeCounts(t)["ok"] <= before["ok"] {
		if time.Now().After(deadline) {
			t.Fatal("no good scrape after the reloads")
		}
		time.Sleep(10 * time.Millisecond) // polling the counter, bounded by the deadline
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	after := scrapeCounts(t)
	for outcome, n := range after {
		if outcome != "ok" && n != before[outcome] {
			t.Errorf("%v scrapes counted %s across %d reloads, want 0: a reload cancelled them", n-before[outcome], outcome, reloads)
		}
	}
	for _, l := range logLines(t, logFile, "engine_metrics: scrape outcome changed") {
		t.Errorf("logged %v on a reload with a healthy engine", l)
	}
}

// scrapeCounts returns the engine_scrapes_total counter by outcome.
func scrapeCounts(t *testing.T) map[string]float64 {
	t.Helper()
	counts := map[string]float64{}
	for _, o := range scrapeOutcomeNames {
		var m dto.Metric
		if err := metrics.scrapes.WithLabelValues(o).Write(&m); err != nil {
			t.Fatal(err)
		}
		counts[o] = m.GetCounter().GetValue()
	}
	return counts
}

// postAcrossReloads sends one chat request to site while configs are
// being reloaded. It uses a connection per request: a reload closes the
// old server's idle ones, and a kept-alive one could be reset under the
// request. On Linux each config listens on its own SO_REUSEPORT socket,
// and the kernel resets a connection still queued on the old one when
// the old config closes it: Caddy's reload, not the policy. Such a
// request never reached a handler, so it is sent again, a bounded
// number of times; a reset on every try fails the test.
func postAcrossReloads(t *testing.T, site string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	var err error
	for try := 0; try < 5; try++ {
		var resp *http.Response
		resp, err = client.Post("http://"+site+"/v1/chat/completions", "application/json",
			bytes.NewReader([]byte(`{"messages":[{"role":"user","content":"hi"}]}`)))
		if err == nil {
			resp.Body.Close()
			return
		}
	}
	t.Fatal(err)
}

// The admin and default-log settings of reloadingConfig's usual callers.
const (
	adminOff   = `{"disabled": true, "config": {"persist": false}}`
	errorsOnly = `{"level": "ERROR"}`
)

// reloadingConfig is the JSON of a Caddy with one server at site whose
// one route is a reverse_proxy to dial, chosen by prefix_cache with the
// given further policy fields, and admin and default log as given. The
// policy's load_factor alternates with i (1.5, 2.5), so that config i+1
// differs from config i and loading it is a reload.
func reloadingConfig(i int, admin, logging, site, dial, policy string) []byte {
	return []byte(fmt.Sprintf(`{
	"admin": %s,
	"logging": {"logs": {"default": %s}},
	"apps": {"http": {"servers": {"s": {
		"listen": [%q],
		"automatic_https": {"disable": true},
		"routes": [{"handle": [{
			"handler": "reverse_proxy",
			"upstreams": [{"dial": %q}],
			"load_balancing": {"selection_policy": {
				"policy": "prefix_cache", "load_factor": %v, %s
			}}
		}]}]
	}}}}
}`, admin, logging, site, dial, 1.5+float64(i%2), policy))
}
