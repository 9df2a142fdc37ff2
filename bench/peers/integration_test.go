package peers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// echoBackend records the bodies it receives and serves /metrics like a
// vLLM engine without KV events.
type echoBackend struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newEchoBackend(t *testing.T) *echoBackend {
	b := &echoBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			io.WriteString(w, engineMetricsText)
			return
		case "/kv_events": // an engine that publishes none
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.bodies = append(b.bodies, body)
		b.mu.Unlock()
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *echoBackend) received() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]byte(nil), b.bodies...)
}

// TestPeersThroughCaddy loads each peer into a real Caddy in front of two
// backends and checks that bodies reach a backend byte for byte, chunked
// or not, routable or not.
func TestPeersThroughCaddy(t *testing.T) {
	backends := []*echoBackend{newEchoBackend(t), newEchoBackend(t)}
	var upstreams []map[string]string
	for _, b := range backends {
		upstreams = append(upstreams, map[string]string{"dial": strings.TrimPrefix(b.srv.URL, "http://")})
	}
	bodies := []string{
		chatBody,
		`{"model":"m","prompt":"` + strings.Repeat("once upon a time ", 40) + `"}`,
		`not json at all`,
	}
	for _, peer := range []string{"peer_sglang", "peer_llmd", "peer_kubeai", "peer_vllmstack", "peer_dynamo", "peer_dynamo_approx"} {
		t.Run(peer, func(t *testing.T) {
			addr := freeAddr(t)
			cfg := map[string]any{
				"admin": map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
				"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"s": map[string]any{
					"listen":          []string{addr},
					"automatic_https": map[string]any{"disable": true},
					"routes": []any{map[string]any{"handle": []any{map[string]any{
						"handler":   "reverse_proxy",
						"upstreams": upstreams,
						"load_balancing": map[string]any{
							"selection_policy": map[string]any{"policy": peer},
						},
					}}}},
				}}}},
			}
			raw, err := json.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := caddy.Load(raw, true); err != nil {
				t.Fatalf("loading a Caddy config with %s: %v", peer, err)
			}
			defer caddy.Stop()

			before := []int{len(backends[0].received()), len(backends[1].received())}
			for i, body := range bodies {
				for _, chunked := range []bool{false, true} {
					var rd io.Reader = strings.NewReader(body)
					if chunked {
						rd = onlyReader{rd}
					}
					resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", rd)
					if err != nil {
						t.Fatalf("request %d (chunked %v): %v", i, chunked, err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("request %d (chunked %v): status %d", i, chunked, resp.StatusCode)
					}
				}
			}
			var got [][]byte
			for i, b := range backends {
				got = append(got, b.received()[before[i]:]...)
			}
			if len(got) != 2*len(bodies) {
				t.Fatalf("backends received %d new bodies, want %d", len(got), 2*len(bodies))
			}
			for _, body := range bodies {
				n := 0
				for _, g := range got {
					if bytes.Equal(g, []byte(body)) {
						n++
					}
				}
				if n != 2 {
					t.Errorf("body %.30q… reached a backend intact %d times, want 2", body, n)
				}
			}
		})
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr())
}
