package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// The fuzzers of the body peek and of the routing pipeline. Run them with
// scripts/fuzz.sh (every fuzzer of the module, for a fixed time each), or
// one at a time:
//
//	go test -run '^$' -fuzz '^FuzzPeek$' -fuzztime 60s ./caddymodule
//	go test -run '^$' -fuzz '^FuzzRoutingHashes$' -fuzztime 60s ./caddymodule
//
// Seed corpora: testdata/fuzz/FuzzPeek and testdata/fuzz/FuzzRoutingHashes,
// plus the f.Add calls below. Without -fuzz, `go test` runs the seeds.

// fuzzBody is a client's request body as the server hands it to Caddy:
// it returns at most step bytes per Read (the network splits bodies
// anywhere), ends with io.EOF or with err, and remembers being closed.
type fuzzBody struct {
	data   []byte
	step   int
	err    error // returned once data is exhausted; io.EOF when nil
	closed bool
	reads  int
}

func (b *fuzzBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("read on closed body")
	}
	b.reads++
	if len(b.data) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), b.step)], b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *fuzzBody) Close() error { b.closed = true; return nil }

var errClientGone = errors.New("fuzz: client went away")

// fuzzRequest returns a request as Caddy hands it to a selection policy:
// with the request's variables and a replacer that knows the request's
// placeholders in its context. (Built by hand rather than with
// caddyhttp.PrepareRequest, which sets up far more than a selection
// policy sees and would slow the fuzzers down.)
func fuzzRequest(method string, body io.ReadCloser, contentLength int64, header http.Header) *http.Request {
	r := httptest.NewRequest(method, "http://llm.example/v1/chat/completions", nil)
	r.Body = body
	r.ContentLength = contentLength
	for k, v := range header {
		r.Header[k] = v
	}
	repl := caddy.NewReplacer()
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	r = r.WithContext(ctx)
	repl.Map(func(key string) (any, bool) {
		if name, ok := strings.CutPrefix(key, "http.request.header."); ok {
			return r.Header.Get(name), true
		}
		return nil, false
	})
	return r
}

// fuzzSelection returns a policy ready for route without a Caddy context:
// the fields Provision would set that route and derive use, and an index
// of its own. It is not under a reverse_proxy handler, so it keeps bodies
// until the request ends.
func fuzzSelection(maxBody int64, chunkSize, maxChunks int) *PrefixCacheSelection {
	ix, err := prefixindex.New(prefixindex.Config{MaxEntries: 1 << 12})
	if err != nil {
		panic(err)
	}
	share := DefaultTenantShare
	return &PrefixCacheSelection{
		ChunkSize:   chunkSize,
		MaxChunks:   maxChunks,
		MaxBody:     maxBody,
		BodyBudget:  1 << 40,
		TenantShare: &share,
		chunker:     prefixindex.Chunker{Size: chunkSize, MaxChunks: maxChunks},
		state:       &sharedState{index: ix},
	}
}

// routed returns the view of a request the policy routes on, or nil.
func routed(p *peeked, v *view) *view {
	if p.skip != skipNone || v == nil || v.skip != skipNone {
		return nil
	}
	return v
}

// Flags of FuzzPeek's request.
const (
	peekGET          = 1 << iota // method GET instead of POST
	peekHTML                     // Content-Type: text/html
	peekGzip                     // Content-Encoding: gzip
	peekFail                     // the client's body ends with an error, not io.EOF
	peekDialError                // the transport closes the body unread before it reads it
	peekLengthZero               // Content-Length: 0 declared (a body present anyway)
	peekLengthUnkown             // chunked: Content-Length -1
)

// FuzzPeek feeds arbitrary bodies, declared lengths, read sizes and
// max_body values through route (readBody, replayBody, derive) and checks:
//
//   - it never panics;
//   - the body the upstream reads is the client's, byte for byte, then
//     the client's own error if its body failed; also after a dial error
//     closed the body unread;
//   - Content-Length and the headers are left as they were, and the
//     client's body is not closed before it has been read;
//   - the request is routed on only if it is a non-empty POST body of at
//     most max_body bytes that is JSON of a known shape, with the exact
//     bytes read; a body larger than max_body is never routed on;
//   - a retry (a second route call) reuses the first reading and reads
//     nothing from the client;
//   - the hashes are those of a fresh reading of the same body.
func FuzzPeek(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hello there, general kenobi"}]}`), uint16(4096), uint8(7), uint8(0))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`), uint16(10), uint8(3), uint8(peekLengthUnkown))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"trunc`), uint16(4096), uint8(1), uint8(peekFail))
	f.Add([]byte(`{"prompt":"abc"}`), uint16(16), uint8(255), uint8(peekDialError))
	f.Add([]byte(`{"prompt":"abc"}`), uint16(15), uint8(0), uint8(0))
	f.Add([]byte(`{"prompt":"abc"}`), uint16(17), uint8(0), uint8(peekLengthUnkown))
	f.Add([]byte("\x1f\x8b\x08\x00"), uint16(4096), uint8(2), uint8(peekGzip))
	f.Add([]byte("<html>"), uint16(4096), uint8(2), uint8(peekHTML|peekGET))
	f.Add([]byte{}, uint16(0), uint8(0), uint8(peekLengthUnkown))
	f.Add([]byte("x"), uint16(1), uint8(0), uint8(peekLengthZero))
	f.Fuzz(func(t *testing.T, body []byte, maxBody uint16, step uint8, flags uint8) {
		orig := bytes.Clone(body)
		method := http.MethodPost
		if flags&peekGET != 0 {
			method = http.MethodGet
		}
		header := http.Header{}
		if flags&peekHTML != 0 {
			header.Set("Content-Type", "text/html")
		}
		if flags&peekGzip != 0 {
			header.Set("Content-Encoding", "gzip")
		}
		cl := int64(len(body))
		switch {
		case flags&peekLengthZero != 0:
			cl = 0
		case flags&peekLengthUnkown != 0:
			cl = -1
		}
		client := &fuzzBody{data: body, step: 1 + int(step)}
		if flags&peekFail != 0 {
			client.err = errClientGone
		}
		r := fuzzRequest(method, client, cl, header)
		wantHeader := r.Header.Clone()
		s := fuzzSelection(1+int64(maxBody), 8, 64)

		p, pv := s.route(r)
		defer endRequest(p)
		v := routed(p, pv)
		if client.closed {
			t.Fatal("route closed the client's body")
		}
		if r.ContentLength != cl {
			t.Fatalf("route changed ContentLength from %d to %d", cl, r.ContentLength)
		}
		if !equalHeader(r.Header, wantHeader) {
			t.Fatalf("route changed the headers from %v to %v", wantHeader, r.Header)
		}

		// Routed on only what it may route on, and with the exact bytes.
		if v != nil {
			switch {
			case method != http.MethodPost || flags&(peekHTML|peekGzip) != 0:
				t.Fatalf("routed on a %s request with headers %v", method, header)
			case flags&peekFail != 0:
				t.Fatal("routed on a body that failed to read")
			case int64(len(body)) > s.MaxBody:
				t.Fatalf("routed on a %d-byte body, max_body %d", len(body), s.MaxBody)
			case len(body) == 0:
				t.Fatal("routed on an empty body")
			case !bytes.Equal(p.body, orig):
				t.Fatalf("routed on %q, the client sent %q", p.body, orig)
			case len(v.hashes) != s.chunker.Len(v.textLen):
				t.Fatalf("%d hashes for %d bytes of text, want %d", len(v.hashes), v.textLen, s.chunker.Len(v.textLen))
			}
		}
		if p.skip == skipTooLarge && int64(len(body)) <= s.MaxBody && cl <= s.MaxBody {
			t.Fatalf("skip too_large for a %d-byte body (declared %d), max_body %d", len(body), cl, s.MaxBody)
		}
		if p.skip == skipEmpty && len(body) > 0 && cl != 0 {
			t.Fatalf("skip empty for a %d-byte body (declared %d)", len(body), cl)
		}

		// A retry finds the first reading and reads nothing.
		reads := client.reads
		if again, av := s.route(r); again != p || av != pv {
			t.Fatalf("second route returned %p/%p, want the first reading %p/%p", again, av, p, pv)
		}
		if client.reads != reads {
			t.Fatalf("second route read the client's body %d more times", client.reads-reads)
		}

		// A dial error: the transport closes the body without reading it.
		// (A body the policy did not wrap is Caddy's own to protect.)
		if rb, ok := r.Body.(*replayBody); ok && flags&peekDialError != 0 {
			if err := rb.Close(); err != nil {
				t.Fatalf("closing the unread body: %v", err)
			}
			if client.closed {
				t.Fatal("closing the unread replay body closed the client's body: a retry would lose it")
			}
		}

		// The upstream reads the client's bytes, in reads of its own size.
		var got []byte
		buf := make([]byte, 1+int(step)/3)
		var err error
		for {
			var n int
			n, err = r.Body.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		if !bytes.Equal(got, orig) {
			t.Fatalf("upstream read %q, the client sent %q", got, orig)
		}
		wantErr := io.EOF
		if client.err != nil {
			wantErr = client.err
		}
		if !errors.Is(err, wantErr) {
			t.Fatalf("upstream's read ended with %v, want %v", err, wantErr)
		}
		if err := r.Body.Close(); err != nil {
			t.Fatalf("closing the body: %v", err)
		}
		if !client.closed && client.reads > 0 {
			t.Fatal("closing the body after reading did not close the client's body")
		}

		// The same body read afresh derives the same hashes.
		if v != nil {
			r2 := fuzzRequest(method, &fuzzBody{data: orig, step: len(orig)}, int64(len(orig)), header)
			q := routed(s.route(r2))
			endRequest(caddyhttpVar(r2))
			if q == nil || !slices.Equal(q.hashes, v.hashes) || q.placement != v.placement || q.dialect != v.dialect {
				t.Fatalf("reading the body again gave %+v, first %#x %#x %s", q, v.hashes, v.placement, v.dialect)
			}
		}
	})
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// routingBody renders a conversation of the first k turns in one of the
// chat dialects, with the volatile fields and key order chosen by shuffle.
// Turns alternate user and assistant.
func routingBody(anthropic bool, model, system string, turns []string, k int, shuffle bool) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []msg
	if !anthropic {
		msgs = append(msgs, msg{"system", system})
	}
	for i, t := range turns[:k] {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, t})
	}
	top := map[string]any{"model": model, "messages": msgs}
	if anthropic {
		top["system"] = system
		top["max_tokens"] = 64
	}
	if !shuffle {
		b, err := json.Marshal(top)
		if err != nil {
			panic(err)
		}
		return b
	}
	// Volatile fields never change the route; json.Marshal sorts keys,
	// so write these by hand, messages first and model last.
	m, _ := json.Marshal(msgs)
	md, _ := json.Marshal(model)
	sys, _ := json.Marshal(system)
	var b bytes.Buffer
	fmt.Fprintf(&b, `{ "stream": true, "messages": %s, "temperature": 0.9, "user": "u-%d", "metadata": {"k": [1, 2]}`, m, k)
	if anthropic {
		fmt.Fprintf(&b, `, "max_tokens": 4096, "system": %s`, sys)
	}
	fmt.Fprintf(&b, `, "stream_options": {"include_usage": true}, "model": %s }`, md)
	return b.Bytes()
}

// routeBody routes body as a fresh request carrying tenant, and returns
// the policy's view of it, or a view with the cause of a skip.
func routeBody(s *PrefixCacheSelection, body []byte, tenant string) *view {
	r := fuzzRequest(http.MethodPost, &fuzzBody{data: body, step: len(body) + 1}, int64(len(body)), http.Header{
		"Content-Type": {"application/json"},
		"X-Tenant":     {tenant},
	})
	p, v := s.route(r)
	endRequest(p)
	if v == nil {
		return &view{skip: p.skip}
	}
	return v
}

// FuzzRoutingHashes checks the routing pipeline end to end, body to chunk
// hashes (dialect parsing, seed, chunker, through route), on conversations
// built from the fuzz input:
//
//   - deterministic: the same body always gives the same hashes and
//     placement key;
//   - volatile fields (stream, temperature, user, metadata,
//     stream_options, max_tokens) and key order change nothing;
//   - prefix stable: the hashes of the first k turns are a prefix of the
//     hashes of the first k+1 turns, and every turn of a conversation has
//     the same placement key once its first user message is in;
//   - isolated: another model or another tenant shares no hash.
func FuzzRoutingHashes(f *testing.F) {
	f.Add("m", "You are a helpful assistant.", []byte("hello\x00hi! how can I help?\x00tell me a story"), uint8(16), uint8(8), "tenant-a", false)
	f.Add("claude", "be brief", []byte("q1\x00a1\x00q2\x00a2"), uint8(1), uint8(200), "", true)
	f.Add("", "", []byte("\x00\x00"), uint8(3), uint8(1), "t", false)
	f.Add("m\"odel\\", "sys\u2028tem \xff\xfe", []byte("caf\xc3\xa9\x00\xed\xa0\x80\x00\"}]"), uint8(5), uint8(3), "x", true)
	f.Fuzz(func(t *testing.T, model, system string, raw []byte, chunk, maxChunks uint8, tenant string, anthropic bool) {
		turns := []string{}
		for _, b := range bytes.Split(raw, []byte{0}) {
			turns = append(turns, string(b))
		}
		if len(turns) > 12 {
			turns = turns[:12]
		}
		s := fuzzSelection(1<<20, 1+int(chunk)%64, 1+int(maxChunks)%64)
		s.Tenant = "{http.request.header.X-Tenant}"
		s.AllowEmptyTenant = true

		var prev *view
		for k := 1; k <= len(turns); k++ {
			body := routingBody(anthropic, model, system, turns, k, false)
			p := routeBody(s, body, tenant)
			if p.skip != skipNone {
				t.Fatalf("turns[:%d] not routed (%v): %s", k, p.skip, body)
			}
			again := routeBody(s, body, tenant)
			if !slices.Equal(again.hashes, p.hashes) || again.placement != p.placement {
				t.Fatalf("not deterministic: %s gave %#x/%#x then %#x/%#x", body, p.hashes, p.placement, again.hashes, again.placement)
			}
			volatile := routingBody(anthropic, model, system, turns, k, true)
			v := routeBody(s, volatile, tenant)
			if v.skip != skipNone || !slices.Equal(v.hashes, p.hashes) || v.placement != p.placement || v.textLen != p.textLen {
				t.Fatalf("volatile fields or key order changed the route:\n%s: %#x/%#x (%d bytes)\n%s: %#x/%#x (%d bytes)",
					body, p.hashes, p.placement, p.textLen, volatile, v.hashes, v.placement, v.textLen)
			}
			if prev != nil {
				if p.textLen < prev.textLen || !slices.Equal(p.hashes[:len(prev.hashes)], prev.hashes) {
					t.Fatalf("not prefix stable: turns[:%d] hashes %#x, turns[:%d] hashes %#x", k-1, prev.hashes, k, p.hashes)
				}
				// For chat, the placement key ends after the first user
				// message: turns[0] in both dialects.
				if p.placement != prev.placement {
					t.Fatalf("placement key of turns[:%d] = %#x, of turns[:%d] = %#x: a conversation must keep its placement", k-1, prev.placement, k, p.placement)
				}
			}
			prev = p

			if len(p.hashes) == 0 {
				continue
			}
			other := routeBody(s, body, tenant+"-other")
			if len(other.hashes) != len(p.hashes) {
				t.Fatalf("another tenant got %d hashes, want %d", len(other.hashes), len(p.hashes))
			}
			for i := range p.hashes {
				if other.hashes[i] == p.hashes[i] {
					t.Fatalf("tenants %q and %q share hash %d (%#x)", tenant, tenant+"-other", i, p.hashes[i])
				}
			}
			om := routeBody(s, routingBody(anthropic, model+"-other", system, turns, k, false), tenant)
			if len(om.hashes) > 0 && om.hashes[0] == p.hashes[0] {
				t.Fatalf("models %q and %q share their first hash %#x", model, model+"-other", p.hashes[0])
			}
		}
	})
}

// TestReadBodyDoesNotTrustContentLength: a client that declares a body of
// max_body bytes and sends a few pins memory for what it sent, not for
// what it declared. (readBody once allocated Content-Length + 1 bytes up
// front, then, after a first read, grew straight to it: 5 MiB per
// connection that sent 32 KiB and stalled.)
func TestReadBodyDoesNotTrustContentLength(t *testing.T) {
	const maxBody = 4 << 20
	for _, sent := range []int{9, 32 << 10, 100 << 10} {
		body := bytes.Repeat([]byte("x"), sent)
		r := fuzzRequest(http.MethodPost, &fuzzBody{data: body, step: 1000, err: errClientGone}, maxBody, nil)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		skip, _, _, rb := readBody(r, maxBody, 1<<40, false)
		runtime.ReadMemStats(&after)
		if skip != skipReadError {
			t.Fatalf("sent %d: readBody() skip = %v, want %v", sent, skip, skipReadError)
		}
		held := cap(rb.buf.b)
		if limit := max(firstRead, 2*sent); held > limit+limit/4 {
			t.Errorf("a body declaring %d bytes and sending %d holds a %d-byte buffer, want at most max(firstRead, 2 x sent) = %d (+ a quarter of rounding)", maxBody, sent, held, limit)
		}
		if rb.buf.inUse != int64(held) {
			t.Errorf("sent %d: the buffer counts %d bytes in use, its capacity is %d", sent, rb.buf.inUse, held)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(4*max(firstRead, sent)) {
			t.Errorf("sent %d: readBody allocated %d bytes in all", sent, alloc)
		}
		got, err := io.ReadAll(r.Body)
		if !bytes.Equal(got, body) || !errors.Is(err, errClientGone) {
			t.Errorf("sent %d: body given back = %d bytes, %v; want the %d bytes sent, then %v", sent, len(got), err, sent, errClientGone)
		}
	}
}

// TestReadBodyGrowsWithBytesReceived: a body that arrives in small reads
// is read exactly, whatever its size relative to the first read and to
// max_body, declared or not, and its buffer is never more than twice what
// arrived (before the size class's rounding).
func TestReadBodyGrowsWithBytesReceived(t *testing.T) {
	for _, size := range []int{1, 511, 4096, firstRead - 1, firstRead, firstRead + 1, 3*firstRead + 7, 1 << 20} {
		for _, declared := range []bool{true, false} {
			body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
			cl := int64(size)
			if !declared {
				cl = -1
			}
			for _, maxBody := range []int64{int64(size) - 1, int64(size), 2 << 20} {
				if maxBody < 1 {
					continue
				}
				r := fuzzRequest(http.MethodPost, &fuzzBody{data: body, step: 1000}, cl, nil)
				skip, read, bb, rb := readBody(r, maxBody, 1<<40, false)
				if int64(size) <= maxBody && (skip != skipNone || !bytes.Equal(read, body)) {
					t.Errorf("size %d, declared %v, max_body %d: readBody() = %v, %d bytes; want the whole body", size, declared, maxBody, skip, len(read))
				}
				if int64(size) > maxBody && skip != skipTooLarge {
					t.Errorf("size %d, declared %v, max_body %d: readBody() = %v, want %v", size, declared, maxBody, skip, skipTooLarge)
				}
				if bb != nil {
					if limit := capacityFor(max(firstRead, 2*size)); cap(bb.b) > limit {
						t.Errorf("size %d, declared %v: a %d-byte buffer, more than %d", size, declared, cap(bb.b), limit)
					}
				}
				got, err := io.ReadAll(r.Body)
				if err != nil || !bytes.Equal(got, body) {
					t.Errorf("size %d, declared %v, max_body %d: body given back %d bytes, %v; want the client's %d", size, declared, maxBody, len(got), err, size)
				}
				if rb != nil && rb.buf != nil && !rb.buf.isReleased() {
					t.Errorf("size %d, declared %v, max_body %d: the buffer is held after the body was replayed whole (no retry can ask for it)", size, declared, maxBody)
				}
			}
		}
	}
}

// caddyhttpVar returns the policy's record of r.
func caddyhttpVar(r *http.Request) *peeked {
	p, _ := caddyhttp.GetVar(r.Context(), varKey).(*peeked)
	return p
}
