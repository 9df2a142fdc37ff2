package peers

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const chatBody = `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hello there"}],"stream":true}`

// onlyReader hides bytes.Reader's other methods, so the request has an
// unknown length (sent chunked).
type onlyReader struct{ io.Reader }

func TestReadBody(t *testing.T) {
	big := `{"model":"m","prompt":"` + strings.Repeat("x", 100) + `"}`
	tests := []struct {
		name     string
		method   string
		body     string
		chunked  bool
		header   map[string]string
		limit    int64
		wantRead bool
	}{
		{name: "chat", method: http.MethodPost, body: chatBody, limit: 1 << 20, wantRead: true},
		{name: "chunked", method: http.MethodPost, body: chatBody, chunked: true, limit: 1 << 20, wantRead: true},
		{name: "get", method: http.MethodGet, body: chatBody, limit: 1 << 20},
		{name: "gzip", method: http.MethodPost, body: chatBody, header: map[string]string{"Content-Encoding": "gzip"}, limit: 1 << 20},
		{name: "form", method: http.MethodPost, body: chatBody, header: map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, limit: 1 << 20},
		{name: "json+charset", method: http.MethodPost, body: chatBody, header: map[string]string{"Content-Type": "application/json; charset=utf-8"}, limit: 1 << 20, wantRead: true},
		{name: "declared too large", method: http.MethodPost, body: big, limit: 64},
		{name: "chunked too large", method: http.MethodPost, body: big, chunked: true, limit: 64},
		{name: "exactly the limit", method: http.MethodPost, body: big, limit: int64(len(big)), wantRead: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				body = onlyReader{body}
			}
			r := httptest.NewRequest(tt.method, "/v1/chat/completions", body)
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			got := readBody(r, tt.limit)
			if (got != nil) != tt.wantRead {
				t.Fatalf("readBody(%s) = %q, want read %v", tt.name, got, tt.wantRead)
			}
			if got != nil && string(got) != tt.body {
				t.Errorf("readBody(%s) = %q, want %q", tt.name, got, tt.body)
			}
			rest, err := io.ReadAll(r.Body)
			if err != nil {
				t.Fatal(err)
			}
			if string(rest) != tt.body {
				t.Errorf("body after readBody(%s) = %q, want the client's %q", tt.name, rest, tt.body)
			}
		})
	}
}

// closeRecorder records whether Close was called.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestReplayBodyKeepsUnreadBodyOpen(t *testing.T) {
	rest := &closeRecorder{Reader: strings.NewReader("tail")}
	b := &replayBody{head: []byte("head"), rest: rest}
	if err := b.Close(); err != nil || rest.closed {
		t.Fatalf("Close() before any Read closed the client's body (err %v)", err)
	}
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "headtail" {
		t.Fatalf("ReadAll = %q, %v, want %q", got, err, "headtail")
	}
	if err := b.Close(); err != nil || !rest.closed {
		t.Errorf("Close() after reading did not close the client's body (err %v)", err)
	}
}

func TestRoutingText(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		wantOK bool
		model  string
	}{
		{"chat", chatBody, true, "m"},
		{"not json", "hello", false, ""},
		{"unknown shape", `{"foo":1}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
			got := routingText(r)
			if got.ok != tt.wantOK || got.model != tt.model {
				t.Errorf("routingText(%q) = ok %v model %q, want %v %q", tt.body, got.ok, got.model, tt.wantOK, tt.model)
			}
			if tt.wantOK && !bytes.Contains(got.text, []byte("Hello there")) {
				t.Errorf("routingText(%q).text = %q, missing the user message", tt.body, got.text)
			}
		})
	}
}

func TestInterner(t *testing.T) {
	var in interner
	for i, name := range []string{"a", "b", "a", "c", "b"} {
		want := []int{0, 1, 0, 2, 1}[i]
		if got := in.id(name); got != want {
			t.Errorf("id(%q) = %d, want %d", name, got, want)
		}
	}
}
