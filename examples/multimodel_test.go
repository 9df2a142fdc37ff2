package examples_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"
)

// TestMultiModelRoutes sends requests through examples/multi-model.Caddyfile,
// its pools pointed at two engines that record the path they were asked
// for: by the body's model, and by path prefix for clients that cannot
// set the model, the prefix stripped before the engine sees the path.
func TestMultiModelRoutes(t *testing.T) {
	src, err := os.ReadFile("multi-model.Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	type hit struct{ engine, path string }
	var mu sync.Mutex
	var hits []hit
	engine := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				return
			}
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			hits = append(hits, hit{name, r.URL.Path})
			mu.Unlock()
			if r.URL.Path != "/v1/chat/completions" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprint(w, `{"choices":[]}`)
		}))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	llama, qwen := engine("llama"), engine("qwen")
	_, port, _ := net.SplitHostPort(freeAddr(t))
	for old, repl := range map[string]string{
		"10.0.0.11:8000 10.0.0.12:8000 10.0.0.13:8000 10.0.0.14:8000": llama,
		"10.0.1.11:8000 10.0.1.12:8000":                               qwen,
		"llm.example.com {":                                           "http://127.0.0.1:" + port + " {",
	} {
		if !bytes.Contains(src, []byte(old)) {
			t.Fatalf("multi-model.Caddyfile no longer has %q", old)
		}
		src = bytes.ReplaceAll(src, []byte(old), []byte(repl))
	}
	runCaddyfile(t, src, nil)
	client := &http.Client{Timeout: 10 * time.Second}
	tests := []struct {
		path, model string
		status      int
		engine      string
	}{
		{"/v1/chat/completions", "meta-llama/Llama-3.1-70B-Instruct", 200, "llama"},
		{"/v1/chat/completions", "Qwen/Qwen2.5-72B-Instruct", 200, "qwen"},
		{"/qwen/v1/chat/completions", "Qwen/Qwen2.5-72B-Instruct", 200, "qwen"},
		{"/qwen/v1/chat/completions", "", 200, "qwen"},
		{"/llama/v1/chat/completions", "", 200, "llama"},
		{"/llama/v1/chat/completions", "Qwen/Qwen2.5-72B-Instruct", 200, "llama"},
		{"/v1/chat/completions", "mistral", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.path+" "+tt.model, func(t *testing.T) {
			mu.Lock()
			hits = nil
			mu.Unlock()
			body := map[string]any{"messages": []map[string]string{{"role": "user", "content": "hello"}}}
			if tt.model != "" {
				body["model"] = tt.model
			}
			raw, _ := json.Marshal(body)
			resp, err := client.Post("http://127.0.0.1:"+port+tt.path, "application/json", bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			got := append([]hit(nil), hits...)
			mu.Unlock()
			if resp.StatusCode != tt.status {
				t.Errorf("POST %s (model %q): status %d, want %d; engines asked: %v", tt.path, tt.model, resp.StatusCode, tt.status, got)
			}
			want := []hit{{tt.engine, "/v1/chat/completions"}}
			if tt.engine == "" {
				want = nil
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("POST %s (model %q): engines asked %v, want %v", tt.path, tt.model, got, want)
			}
		})
	}
}
