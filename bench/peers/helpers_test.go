package peers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// newTestContext returns a Caddy context that the test cancels at its end.
func newTestContext(t *testing.T) caddy.Context {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	return ctx
}

func testPool(n int) reverseproxy.UpstreamPool {
	pool := make(reverseproxy.UpstreamPool, n)
	for i := range pool {
		pool[i] = &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: "127.0.0.1:" + string(rune('1'+i)) + "000"}
	}
	return pool
}

func chatRequest(system, user string) *http.Request {
	body := `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + user + `"}]}`
	return httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
}
