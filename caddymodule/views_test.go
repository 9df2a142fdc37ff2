package caddymodule

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/prefixcache/caddy-prefixcache/fleet"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// provisioned returns a provisioned policy with the given options, and a
// private index (max_entries is the test's own, so no other test shares
// it).
func provisioned(t *testing.T, s *PrefixCacheSelection) *PrefixCacheSelection {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	if err := s.Provision(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Cleanup()
		cancel()
	})
	return s
}

func testPool(n int) reverseproxy.UpstreamPool {
	var pool reverseproxy.UpstreamPool
	for i := range n {
		pool = append(pool, &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: fmt.Sprintf("10.9.0.%d:8000", i+1)})
	}
	return pool
}

func chatRequest(t *testing.T, body []byte) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "http://llm.example/v1/chat/completions", io.NopCloser(bytes.NewReader(body)))
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), httptest.NewRecorder(), &caddyhttp.Server{})
	t.Cleanup(func() { endRequest(caddyhttpVar(r)) })
	return r
}

var testChat = []byte(`{"model":"m","messages":[{"role":"system","content":"` + string(bytes.Repeat([]byte("system prompt "), 200)) + `"},{"role":"user","content":"hello"}]}`)

// When every upstream ID is in use, the policy cannot index a new
// upstream: it asks the fallback policy (skip unindexed) rather than
// answer no upstream (a 503) while upstreams are available.
func TestNoIDsLeftFallsBack(t *testing.T) {
	s := provisioned(t, &PrefixCacheSelection{MaxEntries: 4099})
	names := make([]string, prefixindex.MaxIDs)
	for i := range names {
		names[i] = fmt.Sprintf("filler-%d", i)
	}
	if _, err := s.state.index.InternAll(names, nil); err != nil {
		t.Fatal(err)
	}
	pool := testPool(2)
	r := chatRequest(t, testChat)
	u := s.Select(pool, r, nil)
	if u == nil {
		t.Fatal("Select() = nil with 2 available upstreams and no IDs left, want the fallback's choice")
	}
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if reason, _ := repl.GetString(placeholderPrefix + "reason"); reason != "fallback" {
		t.Errorf("reason = %q, want fallback", reason)
	}
	if skip, _ := repl.GetString(placeholderPrefix + "skip"); skip != "unindexed" {
		t.Errorf("skip = %q, want unindexed", skip)
	}
	if up, _ := repl.GetString(placeholderPrefix + "upstream"); up != u.Dial {
		t.Errorf("upstream placeholder = %q, want the fallback's choice %q", up, u.Dial)
	}
}

// Two policy instances routing one request (two reverse_proxy handlers in
// turn, with other chunk sizes) keep a view each: each remembers the
// upstreams it tried, and each request's byte-bound charge moves between
// its own attempts instead of adding up.
func TestInstancesKeepTheirOwnViews(t *testing.T) {
	a := provisioned(t, &PrefixCacheSelection{MaxEntries: 4101, ChunkSize: 128})
	b := provisioned(t, &PrefixCacheSelection{MaxEntries: 4103, ChunkSize: 512})
	pool := testPool(3)
	r := chatRequest(t, testChat)
	first := a.Select(pool, r, nil)
	b.Select(pool, r, nil)
	second := a.Select(pool, r, nil) // a retry of a's handler
	if first == nil || second == nil || first == second {
		t.Fatalf("a's attempts chose %v then %v, want two different upstreams (the first was tried)", first, second)
	}
	p := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)[varKey].(*peeked)
	if len(p.views) != 2 {
		t.Fatalf("%d views, want one per instance", len(p.views))
	}
	for _, v := range p.views {
		if v.owner == a && len(v.tried) != 2 {
			t.Errorf("a's view tried %v, want both of its attempts", v.tried)
		}
		if v.owner == b && len(v.tried) != 1 {
			t.Errorf("b's view tried %v, want its one attempt", v.tried)
		}
	}
	var total int64
	for id := range prefixindex.ID(8) {
		total += a.state.fleet.Read(id, "", 0, &fleet.Options{}).Bytes
	}
	if want := int64(p.views[0].textLen); total != want {
		t.Errorf("a's index charges %d bytes in flight, want one request's %d", total, want)
	}
	p.finish()
	for id := range prefixindex.ID(8) {
		if n := a.state.fleet.Read(id, "", 0, &fleet.Options{}).Bytes + b.state.fleet.Read(id, "", 0, &fleet.Options{}).Bytes; n != 0 {
			t.Errorf("upstream %d holds %d bytes after the request ended", id, n)
		}
	}
}

// Read and Close of a replay body may run on different goroutines (an
// HTTP/2 transport resets a stream while another goroutine writes its
// body); run under -race.
func TestReplayReadAndCloseConcurrently(t *testing.T) {
	for range 50 {
		r := chatRequest(t, testChat)
		_, _, bb, rb := readBody(r, 1<<20, 1<<40, false)
		if bb == nil {
			t.Fatal("not read")
		}
		var wg sync.WaitGroup
		wg.Go(func() { io.Copy(io.Discard, rb) })
		wg.Go(func() { rb.Close() })
		wg.Go(func() { _ = rb.again() })
		wg.Wait()
		bb.markCtxDone()
	}
}
