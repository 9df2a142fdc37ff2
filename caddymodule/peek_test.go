package caddymodule

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// closeRecorder is a client body that remembers being closed.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// failingReader returns data, then err.
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestReadBodyGivesBackExactBytes(t *testing.T) {
	const maxBody = 64
	body := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	tests := []struct {
		name          string
		method        string
		body          []byte
		contentLength int64 // -1: unknown (chunked)
		header        http.Header
		wantSkip      skipCause
		wantRead      bool // the policy has the bytes to route on
	}{
		{"max_body - 1", http.MethodPost, body(maxBody - 1), maxBody - 1, nil, skipNone, true},
		{"max_body", http.MethodPost, body(maxBody), maxBody, nil, skipNone, true},
		{"max_body + 1 with length", http.MethodPost, body(maxBody + 1), maxBody + 1, nil, skipTooLarge, false},
		{"max_body chunked", http.MethodPost, body(maxBody), -1, nil, skipNone, true},
		{"max_body + 1 chunked", http.MethodPost, body(maxBody + 1), -1, nil, skipTooLarge, false},
		{"much larger chunked", http.MethodPost, body(100 * maxBody), -1, nil, skipTooLarge, false},
		{"one byte", http.MethodPost, body(1), 1, nil, skipNone, true},
		{"empty chunked", http.MethodPost, nil, -1, nil, skipEmpty, false},
		{"GET", http.MethodGet, body(10), 10, nil, skipMethod, false},
		{"gzip", http.MethodPost, body(10), 10, http.Header{"Content-Encoding": {"gzip"}}, skipEncoded, false},
		{"identity encoding", http.MethodPost, body(10), 10, http.Header{"Content-Encoding": {"identity"}}, skipNone, true},
		{"html", http.MethodPost, body(10), 10, http.Header{"Content-Type": {"text/html"}}, skipContentType, false},
		{"json with charset", http.MethodPost, body(10), 10, http.Header{"Content-Type": {"application/json; charset=utf-8"}}, skipNone, true},
		{"vendor +json", http.MethodPost, body(10), 10, http.Header{"Content-Type": {"application/vnd.api+json"}}, skipNone, true},
		{"incremental", http.MethodPost, body(10), -1, http.Header{"Incremental": {"?1"}}, skipIncremental, false},
		{"not incremental", http.MethodPost, body(10), -1, http.Header{"Incremental": {"?0"}}, skipNone, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := &closeRecorder{Reader: bytes.NewReader(tt.body)}
			r := httptest.NewRequest(tt.method, "/v1/chat/completions", nil)
			r.Body = client
			r.ContentLength = tt.contentLength
			for k, v := range tt.header {
				r.Header[k] = v
			}
			skip, read, _, _ := readBody(r, maxBody, 1<<40, false)
			if skip != tt.wantSkip {
				t.Errorf("readBody() skip = %q, want %q", skip, tt.wantSkip)
			}
			if tt.wantRead && !bytes.Equal(read, tt.body) {
				t.Errorf("readBody() read %d bytes, want the whole %d", len(read), len(tt.body))
			}
			if !tt.wantRead && read != nil {
				t.Errorf("readBody() returned %d bytes to route on, want none", len(read))
			}
			if r.ContentLength != tt.contentLength {
				t.Errorf("ContentLength = %d after readBody, want %d unchanged", r.ContentLength, tt.contentLength)
			}
			got, err := io.ReadAll(r.Body)
			if err != nil {
				t.Fatalf("reading the body given back: %v", err)
			}
			if !bytes.Equal(got, tt.body) {
				t.Errorf("body given back has %d bytes, want the client's %d exactly", len(got), len(tt.body))
			}
			if client.closed {
				t.Error("the client's body was closed by the policy")
			}
		})
	}
}

func TestReadBodyErrorIsPassedOn(t *testing.T) {
	boom := errors.New("client went away")
	client := &closeRecorder{Reader: &failingReader{data: []byte(`{"messages":[`), err: boom}}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Body = client
	r.ContentLength = -1
	skip, read, _, _ := readBody(r, 1<<20, 1<<40, false)
	if skip != skipReadError || read != nil {
		t.Errorf("readBody() = %q, %d bytes; want %q, none", skip, len(read), skipReadError)
	}
	got, err := io.ReadAll(r.Body)
	if string(got) != `{"messages":[` || !errors.Is(err, boom) {
		t.Errorf("body given back = %q, %v; want the bytes read, then %v", got, err, boom)
	}
}

func TestReplayBodyCloseKeepsUnreadBodyForRetry(t *testing.T) {
	client := &closeRecorder{Reader: strings.NewReader("rest")}
	b := &replayBody{head: []byte("head-"), rest: client}

	// A dial error: the transport closes the body without reading it.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if client.closed {
		t.Fatal("Close of an unread body closed the client's body; a retry would lose it")
	}
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "head-rest" {
		t.Errorf("after Close, body = %q, %v; want %q", got, err, "head-rest")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !client.closed {
		t.Error("Close after reading did not close the client's body")
	}
}

// routeView routes r as a whole request (it ends at once) and returns the
// policy's view of it: the view route derived, or one holding the cause
// of a skip before any view.
func routeView(s *PrefixCacheSelection, r *http.Request) *view {
	p, v := s.route(r)
	endRequest(p)
	if v == nil {
		return &view{owner: s, skip: p.skip}
	}
	return v
}

// endRequest does what the end of a request's context does to what the
// policy read: the buffer goes back, the views settle. Tests whose
// requests have contexts that never end call it, so that no buffer stays
// charged to the process's body budget.
func endRequest(p *peeked) {
	if p != nil && p.replay != nil && p.replay.buf != nil {
		p.finish()
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, name string
		want          bool
	}{
		{"llama-3.1-70b", "llama-3.1-70b", true},
		{"llama-3.1-70b", "llama-3.1-70b-instruct", false},
		{"llama-3.1-70b*", "llama-3.1-70b-instruct", true},
		{"llama-3.1-70b*", "llama-3.1-70b", true},
		{"meta-llama/*", "meta-llama/Llama-3.1-8B", true},
		{"*-instruct", "qwen2.5-7b-instruct", true},
		{"*-instruct", "qwen2.5-7b-base", false},
		{"q*7b*", "qwen2.5-7b-instruct", true},
		{"a*b*b", "ab", false},
		{"a*b*b", "abb", true},
		{"*", "", true},
		{"x*", "", false},
	} {
		if got := globMatch(tt.pattern, tt.name); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

// A body longer than its declared length (a middleware replaced it
// without updating Content-Length) whose next buffer does not fit the
// budget: the byte read past the declared length to find the end is
// given back with the rest, so the upstream still gets every byte.
func TestReadBodyBudgetKeepsTheByteReadPastDeclared(t *testing.T) {
	SettleBodies()
	const declared = 16 << 10
	body := bytes.Repeat([]byte("x"), declared+100)
	// Room for the first buffer (the declared length) and not its doubling.
	budget := int64(float64(bodyAllocated.Load()+declared+declared/2) * gcHeadroom())
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", io.NopCloser(bytes.NewReader(body)))
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = declared
	skip, _, _, rb := readBody(r, 1<<20, budget, false)
	if skip != skipBudget {
		t.Fatalf("readBody() skip = %v, want %v", skip, skipBudget)
	}
	got, err := io.ReadAll(r.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Errorf("body given back = %d bytes, %v; want the client's %d", len(got), err, len(body))
	}
	if rb != nil && rb.buf != nil {
		rb.buf.markCtxDone()
	}
}
