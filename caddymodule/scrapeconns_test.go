package caddymodule

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// connCounter counts a server's open connections through its ConnState
// hook, and lets a test wait on their number.
type connCounter struct {
	mu      sync.Mutex
	open    int
	changed chan struct{} // closed, and replaced, at each change of open
}

func newConnCounter() *connCounter {
	return &connCounter{changed: make(chan struct{})}
}

func (c *connCounter) hook(_ net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		c.open++
	case http.StateClosed, http.StateHijacked:
		c.open--
	default:
		return
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// waitAtMost waits until at most n connections are open, or until
// timeout; it returns how many are open.
func (c *connCounter) waitAtMost(n int, timeout time.Duration) int {
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		open, changed := c.open, c.changed
		c.mu.Unlock()
		if open <= n {
			return open
		}
		select {
		case <-changed:
		case <-deadline:
			return open
		}
	}
}

// A reload stops the old config's scraper, which closes the idle
// connections its scrapes left in the old reverse_proxy's transport:
// Caddy does not clean up a handler's default transport, so without that
// each reload would leave one kept-alive connection per engine until the
// transport's idle timeout (2 minutes). The engine's metrics are served on
// a port of their own (engine_metrics port), whose server counts the open
// connections: after each of the reloads, they drop back to what one
// config holds, and to none once Caddy stops.
func TestReloadClosesScrapeConnections(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{}`)
	}))
	t.Cleanup(engine.Close)
	scraped := make(chan struct{}, 1)
	conns := newConnCounter()
	metricsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 0\n"+
			"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0\n")
		select {
		case scraped <- struct{}{}:
		default:
		}
	}))
	metricsSrv.Config.ConnState = conns.hook
	metricsSrv.Start()
	t.Cleanup(metricsSrv.Close)
	mu, err := url.Parse(metricsSrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := strconv.Atoi(mu.Port())
	if err != nil {
		t.Fatal(err)
	}

	site := loopbackAddr(t)
	policy := fmt.Sprintf(`"max_entries": 7019, "engine_metrics": {"port": %d, "interval": "200ms", "timeout": "200ms"}`, metricsPort)
	cfg := func(i int) []byte {
		return reloadingConfig(i, adminOff, errorsOnly, site, engine.Listener.Addr().String(), policy)
	}
	// The client's own connections are not what is counted: it opens
	// one per request.
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
	// One config scrapes its one engine one request at a time, so it
	// holds at most one connection to the metrics port (a new config may
	// already be scraping when the old one's connection closes).
	const perConfig, reloads = 1, 8
	var series []int
	for i := 1; i <= reloads; i++ {
		request() // the first Select starts the scrapes
		select {
		case <-scraped:
		case <-time.After(10 * time.Second):
			t.Fatalf("reload %d: no scrape reached the engine's metrics", i)
		}
		if err := caddy.Load(cfg(i), true); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		open := conns.waitAtMost(perConfig, 10*time.Second)
		series = append(series, open)
		if open > perConfig {
			t.Fatalf("after reload %d: %d connections open at the engine's metrics port, want at most %d (after each reload so far: %v)",
				i, open, perConfig, series)
		}
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if open := conns.waitAtMost(0, 10*time.Second); open != 0 {
		t.Errorf("after Caddy stopped: %d connections open at the engine's metrics port, want 0", open)
	}
	t.Logf("open connections at the metrics port after each reload: %v", series)
}
