package caddymodule

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// The "policy ready" line says what the loaded policy does; its
// sync_load field is on exactly when the policy syncs and shares load.
func TestReadyLogSaysSyncLoad(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(backend.Close)
	tests := []struct {
		name   string
		policy string
		want   bool
	}{
		{"sync, sync_load by default", `"sync": {"transport": "fake", "bus": "ready-log"}`, true},
		{"sync, sync_load off", `"sync": {"transport": "fake", "bus": "ready-log"}, "sync_load": false`, false},
		{"no sync", `"load_factor": 1.5`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := readyLines(t, backend.Listener.Addr().String(), tt.policy)
			if len(lines) != 1 {
				t.Fatalf("%d \"policy ready\" lines, want 1", len(lines))
			}
			if got := lines[0]["sync_load"]; got != tt.want {
				t.Errorf("policy {%s}: ready line's sync_load = %v, want %v", tt.policy, got, tt.want)
			}
		})
	}
}

// readyLines loads a Caddy with a prefix_cache policy of the given JSON
// fields in front of dial, stops it, and returns its log's "prefix_cache
// policy ready" lines.
func readyLines(t *testing.T, dial, policy string) []map[string]any {
	t.Helper()
	fields := `"load_balancing": {"selection_policy": {"policy": "prefix_cache", "max_entries": 7011, ` + policy + `}}`
	return loadedLog(t, dial, fields, "prefix_cache policy ready")
}

// loadedLog loads a Caddy whose one route is a reverse_proxy to dial with
// the handler's other JSON fields, stops it, and returns its log's lines
// whose msg is msg.
func loadedLog(t *testing.T, dial, fields, msg string) []map[string]any {
	t.Helper()
	logFile := filepath.Join(t.TempDir(), "caddy.log")
	cfg := fmt.Sprintf(`{
	"admin": {"disabled": true, "config": {"persist": false}},
	"logging": {"logs": {"default": {"level": "INFO", "writer": {"output": "file", "filename": %q}, "encoder": {"format": "json"}}}},
	"apps": {"http": {"servers": {"s": {
		"listen": [%q],
		"automatic_https": {"disable": true},
		"routes": [{"handle": [{"handler": "reverse_proxy", "upstreams": [{"dial": %q}], %s}]}]
	}}}}
}`, logFile, loopbackAddr(t), dial, fields)
	if err := caddy.Load([]byte(cfg), true); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	return logLines(t, logFile, msg)
}

// logLines returns the JSON lines of a Caddy log file whose msg is msg.
func logLines(t *testing.T, file, msg string) []map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == msg {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// lb_try_duration's clock runs while the policy reads the body: loading
// it without request_buffers warns, with request_buffers it does not.
func TestTryDurationWarnsWithoutRequestBuffers(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(backend.Close)
	const msg = "lb_try_duration's clock runs while the policy reads the request body: a slow upload spends the time a retry after a dial error needs; set request_buffers (Caddy then reads the body first), or use lb_retries"
	for _, tt := range []struct {
		handler string
		want    int
	}{
		{`"load_balancing": {"try_duration": "1s", "selection_policy": {"policy": "prefix_cache"}}`, 1},
		{`"request_buffers": 4194304, "load_balancing": {"try_duration": "1s", "selection_policy": {"policy": "prefix_cache"}}`, 0},
		{`"load_balancing": {"retries": 2, "selection_policy": {"policy": "prefix_cache"}}`, 0},
	} {
		if got := len(loadedLog(t, backend.Listener.Addr().String(), tt.handler, msg)); got != tt.want {
			t.Errorf("{%s}: %d warnings, want %d", tt.handler, got, tt.want)
		}
	}
}

// The model matcher's deprecated name still matches, and says it is
// deprecated when loaded; its new name says nothing.
func TestDeprecatedModelMatcher(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(backend.Close)
	const msg = "the model matcher is deprecated: it is now prefix_cache_model (http.matchers.prefix_cache_model), which works the same"
	for name, want := range map[string]int{"model": 1, "prefix_cache_model": 0} {
		logFile := filepath.Join(t.TempDir(), "caddy.log")
		site := loopbackAddr(t)
		cfg := fmt.Sprintf(`{
	"admin": {"disabled": true, "config": {"persist": false}},
	"logging": {"logs": {"default": {"level": "INFO", "writer": {"output": "file", "filename": %q}, "encoder": {"format": "json"}}}},
	"apps": {"http": {"servers": {"s": {
		"listen": [%q],
		"automatic_https": {"disable": true},
		"routes": [
			{"match": [{%q: ["llama*"]}], "handle": [{"handler": "static_response", "status_code": 201}]},
			{"handle": [{"handler": "static_response", "status_code": 404}]}
		]
	}}}}
}`, logFile, site, name)
		if err := caddy.Load([]byte(cfg), true); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post("http://"+site+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama-3","messages":[{"role":"user","content":"hi"}]}`))
		if err == nil {
			resp.Body.Close()
		}
		if err := caddy.Stop(); err != nil {
			t.Fatal(err)
		}
		if err != nil || resp.StatusCode != 201 {
			t.Errorf("%s matcher: %v, status %v; want a match (201)", name, err, resp)
		}
		if got := len(logLines(t, logFile, msg)); got != want {
			t.Errorf("%s matcher: %d deprecation warnings, want %d", name, got, want)
		}
	}
}
