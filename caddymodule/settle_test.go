package caddymodule_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// An upstream that never answered is not confirmed, even when another
// reverse_proxy of the same request (here forward_auth, which is one) left
// a 200 in {http.reverse_proxy.status_code}: the confirmation is the
// chosen attempt's own answer. The engine that answers is confirmed.
func TestSettleConfirmsOnlyTheChosenAttemptsAnswer(t *testing.T) {
	auth := newBackend(t, "auth")
	up := newBackend(t, "up")
	dead, port, deadPort := refusedPort(t), freePort(t), freePort(t)
	admin := startCaddyAdmin(t, fmt.Sprintf(`http://127.0.0.1:%d {
	forward_auth %s {
		uri /auth
	}
	reverse_proxy 127.0.0.1:%d {
		lb_policy prefix_cache
	}
}
http://127.0.0.1:%d {
	forward_auth %s {
		uri /auth
	}
	reverse_proxy %s {
		lb_policy prefix_cache
	}
}
`, deadPort, auth.addr(), dead, port, auth.addr(), up.addr()))
	post := func(port int) int {
		t.Helper()
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json",
			bytes.NewReader(chat("sys", words("settle", 400))))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const confirmed = `caddy_prefix_cache_settlements_total{outcome="confirmed"}`
	const unconfirmed = `caddy_prefix_cache_settlements_total{outcome="unconfirmed"}`
	for _, tt := range []struct {
		name                   string
		port                   int
		status                 int
		confirmed, unconfirmed float64
	}{
		{"dead upstream", deadPort, http.StatusBadGateway, 0, 1},
		{"live upstream", port, http.StatusOK, 1, 0},
	} {
		before := scrape(t, admin, "caddy_prefix_cache_settlements_total")
		if got := post(tt.port); got != tt.status {
			t.Fatalf("%s: status %d, want %d", tt.name, got, tt.status)
		}
		// A request settles as its handler returns, which may be just
		// after the client has read the whole response.
		after := scrape(t, admin, "caddy_prefix_cache_settlements_total")
		for deadline := time.Now().Add(5 * time.Second); after[confirmed]+after[unconfirmed] == before[confirmed]+before[unconfirmed] && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond) // polling the metrics, bounded by the deadline
			after = scrape(t, admin, "caddy_prefix_cache_settlements_total")
		}
		if d := after[confirmed] - before[confirmed]; d != tt.confirmed {
			t.Errorf("%s: confirmed settlements rose by %v, want %v", tt.name, d, tt.confirmed)
		}
		if d := after[unconfirmed] - before[unconfirmed]; d != tt.unconfirmed {
			t.Errorf("%s: unconfirmed settlements rose by %v, want %v", tt.name, d, tt.unconfirmed)
		}
	}
}
