package examples_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestClientsCannotMarkEnginesDown runs Caddyfile.example as shipped in
// front of four engines while 32 clients each start an upload the policy
// does not buffer (a form, which Caddy streams to the engine as it
// arrives), stall, and hang up. Caddy counts a proxied request that ends
// in an error, the client's failed upload included, as a failure of the
// upstream when passive health checks are on (fail_duration), so with
// them these clients could take every engine out. With the shipped
// options every engine stays available, and ordinary requests are served
// during the attack and after it.
func TestClientsCannotMarkEnginesDown(t *testing.T) {
	var addrs []string
	var engines []*engine
	for i := range 4 {
		e := startEngine(t, fmt.Sprintf("e%d", i))
		engines = append(engines, e)
		addrs = append(addrs, e.addr)
	}
	url, port, admin := runExample(t, readExample(t), addrs)
	client := &http.Client{Timeout: 30 * time.Second}
	convs := []*conversation{newConversation(0), newConversation(1), newConversation(2), newConversation(3)}
	for _, o := range runTurns(client, url, convs, 1) {
		if o.err != nil {
			t.Fatalf("before the attack: %s: %v", o.conv, o.err)
		}
	}

	// 32 uploads, each proxied to an engine that waits for the rest of
	// the body; the engines' handlers block reading it.
	const uploads = 32
	var conns []net.Conn
	for i := range uploads {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\nprompt=%d&", i)
	}
	poll(t, 30*time.Second, "the uploads to reach the engines", func() bool {
		return metricSum(t, admin, "caddy_prefix_cache_upstream_in_flight") >= uploads
	})
	// The clients hang up, one after another, while ordinary clients go
	// on.
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	outcomes := runTurns(client, url, convs, 2)
	wg.Wait()
	poll(t, 30*time.Second, "the hung-up uploads to end", func() bool {
		return metricSum(t, admin, "caddy_prefix_cache_upstream_in_flight") == 0
	})
	outcomes = append(outcomes, runTurns(client, url, convs, 2)...)
	for _, o := range outcomes {
		if o.err != nil {
			t.Errorf("during or after the attack: %s request %s: %v", o.conv, o.reqID, o.err)
		}
	}
	for dial, ok := range available(t, admin) {
		if !ok {
			t.Errorf("after the attack, %s is marked down: clients took it out", dial)
		}
	}
}

// metricSum scrapes Caddy's admin /metrics and sums the samples of the
// metric name, whatever their labels.
func metricSum(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}
