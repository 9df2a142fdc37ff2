package caddymodule_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/prefixcache/caddy-prefixcache/caddymodule"
)

// Hostile input through a real Caddy. Every case is sent twice: to a site
// whose reverse_proxy uses prefix_cache, and to a twin site, otherwise
// identical, that uses stock least_conn. Each site has its own pair of
// upstreams that hash what they receive as it arrives. A case passes when
// Caddy answers both sites alike (status, or the same transport failure)
// and every request an upstream read to its end carries exactly the
// client's bytes (sha256), framing (Content-Length or chunked), trailers
// and content headers as the stock site's upstream got them.

// sink is an upstream that hashes the body as it arrives, keeps nothing
// else of it, and answers 200 with the digest.
type sink struct {
	srv *httptest.Server

	mu  sync.Mutex
	got []sunk
}

// sunk is what one request brought a sink.
type sunk struct {
	method          string
	size            int64
	digest          string
	contentLength   int64
	chunked         bool
	trailer         string // the trailers as "k=v;..." sorted
	contentType     string
	contentEncoding string
	err             error // reading the body failed (truncated by Caddy or the client)
}

func newSink(t *testing.T) *sink {
	t.Helper()
	s := &sink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		got := sunk{
			method:          r.Method,
			size:            n,
			digest:          hex.EncodeToString(h.Sum(nil)),
			contentLength:   r.ContentLength,
			chunked:         slices.Contains(r.TransferEncoding, "chunked"),
			trailer:         headerString(r.Trailer),
			contentType:     r.Header.Get("Content-Type"),
			contentEncoding: r.Header.Get("Content-Encoding"),
			err:             err,
		}
		s.mu.Lock()
		s.got = append(s.got, got)
		s.mu.Unlock()
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Sink-Sha256", got.digest)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"bytes":%d}`, n)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) addr() string { return s.srv.Listener.Addr().String() }

func (s *sink) records() []sunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func headerString(h http.Header) string {
	var kv []string
	for k, v := range h {
		kv = append(kv, k+"="+strings.Join(v, ","))
	}
	slices.Sort(kv)
	return strings.Join(kv, ";")
}

// twin is a Caddy with two sites in front of two pairs of sinks: ours
// (prefix_cache) and stock (least_conn).
type twin struct {
	ours, stock     string // base URLs
	oursUp, stockUp []*sink
}

// startTwin starts the twin sites. before is site-level Caddyfile
// (request_body, say), proxyOpts go in both reverse_proxy blocks, and
// policyOpts in ours' lb_policy block.
func startTwin(t *testing.T, before, proxyOpts, policyOpts string) *twin {
	t.Helper()
	tw := &twin{
		oursUp:  []*sink{newSink(t), newSink(t)},
		stockUp: []*sink{newSink(t), newSink(t)},
	}
	site := func(port int, ups []*sink, policy string) string {
		return fmt.Sprintf(`http://127.0.0.1:%d {
	%s
	reverse_proxy %s %s {
		lb_policy %s
		%s
	}
}
`, port, before, ups[0].addr(), ups[1].addr(), policy, proxyOpts)
	}
	ports := startSites(t, 2, func(p []int) string {
		return site(p[0], tw.oursUp, "prefix_cache {\n"+policyOpts+"\n}") + site(p[1], tw.stockUp, "least_conn")
	})
	tw.ours = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	tw.stock = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	return tw
}

// distinctPorts returns n loopback ports that were free a moment ago, all
// different: their listeners are open together until all are chosen.
// (Ports chosen one at a time, as freePort does, can repeat, since the
// kernel may hand out a just-closed port again; a site port equal to the
// https_port of the global options fails the config.)
func distinctPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// globalBlock is the tests' global options (as the harness's
// globalOptions writes them) with the given http_port and https_port.
func globalBlock(admin, storage string, httpPort, httpsPort int) string {
	return fmt.Sprintf(`{
	%s
	persist_config off
	skip_install_trust
	log default {
		output discard
	}
	storage file_system %s
	http_port %d
	https_port %d
	servers {
		protocols h1 h2
	}
}
`, admin, storage, httpPort, httpsPort)
}

// startSites runs the sites that sites writes on n ports of its own, with
// global options whose http_port and https_port differ from them, until
// the test ends. It returns the n ports.
func startSites(t *testing.T, n int, sites func(ports []int) string) []int {
	t.Helper()
	ports := distinctPorts(t, n+2)
	cfg := caddyfileJSON(t, globalBlock("admin off", t.TempDir(), ports[n], ports[n+1])+sites(ports[:n]))
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading config: %v", err)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping Caddy: %v", err)
		}
	})
	return ports[:n]
}

// hostileReq is one hostile request. body returns a fresh reader of the
// same bytes each time; size and digest describe those bytes.
type hostileReq struct {
	name    string
	method  string
	header  http.Header
	body    func() io.Reader
	size    int64
	digest  string
	chunked bool        // send without a length
	trailer http.Header // chunked only: trailers sent after the body
	expect  bool        // send Expect: 100-continue and wait for it
}

// outcome is how Caddy answered one hostile request.
type outcome struct {
	status int
	err    error
	ups    []sunk // what the site's upstreams recorded meanwhile
}

func bytesReq(name, method string, body []byte, header http.Header) hostileReq {
	return hostileReq{
		name:   name,
		method: method,
		header: header,
		body:   func() io.Reader { return bytes.NewReader(body) },
		size:   int64(len(body)),
		digest: digest(body),
	}
}

// streamReq is a request whose body is generated: prefix, then n bytes of
// a repeating pattern, then suffix. Its digest is computed by streaming.
func streamReq(name string, prefix string, n int64, suffix string) hostileReq {
	gen := func() io.Reader {
		return io.MultiReader(strings.NewReader(prefix), io.LimitReader(new(patternReader), n), strings.NewReader(suffix))
	}
	h := sha256.New()
	size, _ := io.Copy(h, gen())
	return hostileReq{name: name, method: http.MethodPost, body: gen, size: size, digest: hex.EncodeToString(h.Sum(nil))}
}

// patternReader repeats the lower-case alphabet: printable and valid
// inside a JSON string, the same stream whatever the sizes of the reads.
// It copies from a block rather than writing byte by byte, which the race
// detector would make slow at 100 MB.
type patternReader struct{ off int }

var pattern = func() []byte {
	b := make([]byte, 26<<10)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

func (r *patternReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], pattern[r.off:])
		n += k
		r.off = (r.off + k) % len(pattern)
	}
	return n, nil
}

// noLength hides a reader's length, so the client sends it chunked.
type noLength struct{ io.Reader }

// send sends c to base and waits for the whole answer.
func send(t *testing.T, base string, ups []*sink, c hostileReq) outcome {
	t.Helper()
	before := make([]int, len(ups))
	for i, u := range ups {
		before[i] = len(u.records())
	}
	var body io.Reader
	if c.body != nil {
		body = c.body()
		if c.chunked {
			body = noLength{body}
		}
	}
	method := c.method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, base+"/v1/chat/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if _, ok := c.header["Content-Type"]; !ok && body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.chunked {
		req.ContentLength = -1
		req.Trailer = c.trailer
	}
	tr := &http.Transport{DisableKeepAlives: true}
	if c.expect {
		req.Header.Set("Expect", "100-continue")
		tr.ExpectContinueTimeout = time.Minute // send the body only when asked
	}
	defer tr.CloseIdleConnections()
	var o outcome
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		o.err = err
	} else {
		_, o.err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		o.status = resp.StatusCode
	}
	for i, u := range ups {
		o.ups = append(o.ups, u.records()[before[i]:]...)
	}
	return o
}

// check sends c to both sites and compares.
func (tw *twin) check(t *testing.T, c hostileReq) {
	t.Helper()
	ours := send(t, tw.ours, tw.oursUp, c)
	stock := send(t, tw.stock, tw.stockUp, c)
	if (ours.err == nil) != (stock.err == nil) || ours.status != stock.status {
		t.Errorf("%s: prefix_cache answered %d (err %v), least_conn %d (err %v)", c.name, ours.status, ours.err, stock.status, stock.err)
	}
	whole := func(o outcome) []sunk {
		var w []sunk
		for _, u := range o.ups {
			if u.err == nil {
				w = append(w, u)
			}
		}
		return w
	}
	oursWhole, stockWhole := whole(ours), whole(stock)
	if len(oursWhole) != len(stockWhole) {
		t.Errorf("%s: prefix_cache's upstreams read %d whole bodies, least_conn's %d", c.name, len(oursWhole), len(stockWhole))
		return
	}
	for i, got := range oursWhole {
		want := stockWhole[i]
		if got.digest != c.digest || got.size != c.size {
			t.Errorf("%s: prefix_cache's upstream read %d bytes (sha256 %.12s), the client sent %d (sha256 %.12s)", c.name, got.size, got.digest, c.size, c.digest)
		}
		got.err, want.err = nil, nil
		if got != want {
			t.Errorf("%s: prefix_cache's upstream got\n\t%+v\nleast_conn's got\n\t%+v", c.name, got, want)
		}
	}
	if c.method == http.MethodPost && ours.status == http.StatusOK && len(oursWhole) != 1 {
		t.Errorf("%s: answered 200 but the upstreams read %d whole bodies, want 1", c.name, len(oursWhole))
	}
}

// validChat is a chat body long enough to be routed on (several chunks).
var validChat = chat("You are a careful assistant. "+words("system", 200), words("question", 100))

func TestHostileMalformedJSON(t *testing.T) {
	tw := startTwin(t, "", "", "")
	cases := []hostileReq{
		bytesReq("missing closing brace", "", validChat[:len(validChat)-1], nil),
		bytesReq("trailing garbage", "", append(slices.Clone(validChat), []byte(`{"x":1}`)...), nil),
		bytesReq("two documents", "", append(slices.Clone(validChat), validChat...), nil),
		bytesReq("messages is a number", "", []byte(`{"model":"m","messages":5}`), nil),
		bytesReq("messages is null", "", []byte(`{"model":"m","messages":null}`), nil),
		bytesReq("content is an object", "", []byte(`{"model":"m","messages":[{"role":"user","content":{"a":[1,2,{}]}}]}`), nil),
		bytesReq("duplicate keys", "", []byte(`{"model":"a","model":"b","messages":[],"messages":[{"role":"user","content":"x"}]}`), nil),
		bytesReq("NaN and huge numbers", "", []byte(`{"model":"m","temperature":NaN,"max_tokens":1e999999,"messages":[{"role":"user","content":"x"}]}`), nil),
		bytesReq("unterminated string", "", []byte(`{"model":"m","messages":[{"role":"user","content":"abc`), nil),
		bytesReq("bad escape", "", []byte(`{"model":"m","messages":[{"role":"user","content":"\x\u12"}]}`), nil),
		bytesReq("control characters", "", []byte("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x00b\x01\x1fc\"}]}"), nil),
		bytesReq("byte order mark", "", append([]byte("\xef\xbb\xbf"), validChat...), nil),
		bytesReq("only whitespace", "", []byte(" \t\r\n "), nil),
		bytesReq("null", "", []byte("null"), nil),
		bytesReq("empty object", "", []byte("{}"), nil),
		bytesReq("binary", "", []byte{0, 1, 2, 0xff, 0xfe, '{', '"'}, nil),
		bytesReq("form data", "", []byte("model=m&messages=hello"), nil),
	}
	for cut := 1; cut < len(validChat); cut += len(validChat)/7 + 1 {
		cases = append(cases, bytesReq(fmt.Sprintf("truncated at %d of %d", cut, len(validChat)), "", validChat[:cut], nil))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tw.check(t, c)
			c.chunked = true
			c.name += " (chunked)"
			tw.check(t, c)
		})
	}
}

func TestHostileDeepNesting(t *testing.T) {
	const depth = 100_000
	open, close := strings.Repeat("[", depth), strings.Repeat("]", depth)
	objOpen, objClose := strings.Repeat(`{"a":`, depth), strings.Repeat("}", depth)
	tw := startTwin(t, "", "", "max_body 8MiB")
	cases := []hostileReq{
		bytesReq("arrays in content", "", []byte(`{"model":"m","messages":[{"role":"user","content":`+open+`"x"`+close+`}]}`), nil),
		bytesReq("objects in content", "", []byte(`{"model":"m","messages":[{"role":"user","content":`+objOpen+`1`+objClose+`}]}`), nil),
		bytesReq("arrays in tool arguments", "", []byte(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":`+open+close+`}}]}]}`), nil),
		bytesReq("arrays as messages", "", []byte(`{"model":"m","messages":`+open+close+`}`), nil),
		bytesReq("arrays at the top", "", []byte(open+close), nil),
		bytesReq("objects at the top", "", []byte(objOpen+"1"+objClose), nil),
		bytesReq("unclosed arrays", "", []byte(`{"model":"m","messages":[{"role":"user","content":`+open), nil),
		bytesReq("unbalanced", "", []byte(`{"model":"m","messages":[{"role":"user","content":`+open+strings.Repeat("}", depth)+`}]}`), nil),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tw.check(t, c)
			c.chunked = true
			tw.check(t, c)
		})
	}
}

// A single 50 MB string: chunked, under the default max_body, the policy
// reads 4 MiB of it, finds it too large and replays those bytes in front
// of the rest; with its length declared, under a max_body of 64 MiB, the
// policy reads and parses all of it. (Declared and larger than max_body,
// it is not read at all: TestHostileBodySizes covers that path.)
func TestHostileHugeString(t *testing.T) {
	const n = 50 << 20
	c := streamReq("50 MB string", `{"model":"m","messages":[{"role":"user","content":"`, n, `"}]}`)
	t.Run("chunked, default max_body", func(t *testing.T) {
		tw := startTwin(t, "", "", "")
		chunked := c
		chunked.chunked = true
		tw.check(t, chunked)
	})
	t.Run("declared, max_body 64MiB", func(t *testing.T) {
		parsed := c
		if caddymodule.RaceEnabled {
			// The race detector makes the parse of 50 MB take ~15 s; the
			// same path at 8 MB keeps `go test -race` quick. Plain
			// `go test` parses the whole 50 MB.
			parsed = streamReq("8 MB string (race detector)", `{"model":"m","messages":[{"role":"user","content":"`, 8<<20, `"}]}`)
		}
		tw := startTwin(t, "", "", "max_body 64MiB")
		tw.check(t, parsed)
	})
}

func TestHostileInvalidUTF8(t *testing.T) {
	tw := startTwin(t, "", "", "")
	long := words("utf8", 300)
	cases := []hostileReq{
		bytesReq("0xff in content", "", []byte(`{"model":"m","messages":[{"role":"user","content":"`+long+"\xff\xfe\xfd"+`"}]}`), nil),
		bytesReq("overlong encoding", "", []byte(`{"model":"m","messages":[{"role":"user","content":"`+long+"\xc0\xaf\xe0\x80\xaf"+`"}]}`), nil),
		bytesReq("truncated sequence", "", []byte(`{"model":"m","messages":[{"role":"user","content":"`+long+"\xe2\x82"+`"}]}`), nil),
		bytesReq("lone surrogate escapes", "", []byte(`{"model":"m","messages":[{"role":"user","content":"`+long+`\ud800\udfff\udc00"}]}`), nil),
		bytesReq("raw surrogate bytes", "", []byte(`{"model":"m","messages":[{"role":"user","content":"`+long+"\xed\xa0\x80"+`"}]}`), nil),
		bytesReq("invalid model name", "", []byte("{\"model\":\"\xff\",\"messages\":[{\"role\":\"user\",\"content\":\""+long+"\"}]}"), nil),
		bytesReq("invalid key", "", []byte("{\"\xff\xff\":1,\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\""+long+"\"}]}"), nil),
		bytesReq("latin-1 body", "", []byte("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9 "+long+"\"}]}"), nil),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { tw.check(t, c) })
	}
}

func TestHostileContentEncoding(t *testing.T) {
	tw := startTwin(t, "", "", "")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(validChat)
	zw.Close()
	enc := func(v ...string) http.Header { return http.Header{"Content-Encoding": v} }
	cases := []hostileReq{
		bytesReq("gzip", "", gz.Bytes(), enc("gzip")),
		bytesReq("gzip header on plain JSON", "", validChat, enc("gzip")),
		bytesReq("gzip body without the header", "", gz.Bytes(), nil),
		bytesReq("br", "", []byte("\x0b\x02\x80not really brotli"), enc("br")),
		bytesReq("deflate", "", validChat, enc("deflate")),
		bytesReq("identity", "", validChat, enc("identity")),
		bytesReq("gzip, identity", "", gz.Bytes(), enc("gzip, identity")),
		bytesReq("two headers", "", gz.Bytes(), enc("identity", "gzip")),
		bytesReq("empty value", "", validChat, enc("")),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tw.check(t, c)
			c.chunked = true
			tw.check(t, c)
		})
	}
}

// Expect: 100-continue: the client sends its body only once Caddy asks for
// it. The policy's read is what asks, for bodies it reads; Caddy's
// transport asks, for bodies it leaves alone.
func TestHostileExpectContinue(t *testing.T) {
	tw := startTwin(t, "", "", "max_body 4KiB")
	cases := []hostileReq{
		bytesReq("json", "", validChat, nil),
		bytesReq("larger than max_body", "", chat("sys", words("big", 2000)), nil),
		bytesReq("not json", "", []byte("plain"), http.Header{"Content-Type": {"text/plain"}}),
		bytesReq("gzip", "", validChat, http.Header{"Content-Encoding": {"gzip"}}),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.expect = true
			tw.check(t, c)
			c.chunked = true
			tw.check(t, c)
		})
	}
}

// Chunked bodies with trailers: the upstream gets the body and the
// trailers as the stock site's does, whether or not the policy read the
// body to its end (and so saw the trailers arrive) before the transport
// started.
func TestHostileChunkedTrailers(t *testing.T) {
	tw := startTwin(t, "", "", "max_body 4KiB")
	trailer := func() http.Header {
		return http.Header{"X-Checksum": {"abc123"}, "X-Tokens": {"42"}}
	}
	cases := []hostileReq{
		bytesReq("json", "", validChat, nil),
		bytesReq("larger than max_body", "", chat("sys", words("big", 2000)), nil),
		bytesReq("malformed", "", validChat[:100], nil),
		bytesReq("one byte", "", []byte("{"), nil),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.chunked = true
			c.trailer = trailer()
			tw.check(t, c)
		})
	}
}

// Bodies of 0 and 1 bytes, max_body - 1, max_body and max_body + 1 (the
// first size the policy does not route on), and 100 MB, each with its
// length declared and chunked.
func TestHostileBodySizes(t *testing.T) {
	const maxBody = 4096
	tw := startTwin(t, "", "", fmt.Sprintf("max_body %d", maxBody))
	cases := []hostileReq{
		bytesReq("0 bytes", "", nil, nil),
		bytesReq("1 byte", "", []byte("{"), nil),
		bytesReq("max_body - 1", "", padTo(maxBody-1), nil),
		bytesReq("max_body", "", padTo(maxBody), nil),
		bytesReq("max_body + 1", "", padTo(maxBody+1), nil),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tw.check(t, c)
			c.chunked = true
			tw.check(t, c)
		})
	}
	// 100 MB chunked: the policy reads max_body + 1 bytes and replays them
	// in front of the other 99.99 MB. (Declared, it is the max_body + 1
	// path above: not read.)
	c := streamReq("100 MB", `{"model":"m","messages":[{"role":"user","content":"`, 100<<20, `"}]}`)
	c.chunked = true
	t.Run(c.name, func(t *testing.T) { tw.check(t, c) })
}

func TestHostileMethods(t *testing.T) {
	tw := startTwin(t, "", "", "")
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		for _, body := range [][]byte{nil, validChat} {
			c := bytesReq(fmt.Sprintf("%s with %d bytes", method, len(body)), method, body, nil)
			if body == nil {
				c.body = nil
			}
			t.Run(c.name, func(t *testing.T) {
				tw.check(t, c)
				if body != nil {
					c.chunked = true
					tw.check(t, c)
				}
			})
		}
	}
}

func TestHostileContentType(t *testing.T) {
	tw := startTwin(t, "", "", "")
	for _, ct := range []string{
		"", "application/json", "application/json; charset=utf-8", "Application/JSON",
		"text/plain", "text/html", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
		"application/octet-stream", "application/vnd.api+json", "application/", "json", ";;;", "application/json; charset=\"",
	} {
		t.Run(fmt.Sprintf("Content-Type %q", ct), func(t *testing.T) {
			h := http.Header{"Content-Type": {ct}}
			if ct == "" {
				h = http.Header{"Content-Type": nil} // none sent
			}
			c := bytesReq(ct, "", validChat, h)
			tw.check(t, c)
		})
	}
}

// Caddy's request_body max_size limits what later handlers may read: the
// policy's read hits the limit as the transport's would, and Caddy answers
// as it does without the policy, whichever of the two limits is smaller.
func TestHostileRequestBodyMaxSize(t *testing.T) {
	const maxSize = 2048
	for _, maxBody := range []int{1024, 4096} {
		t.Run(fmt.Sprintf("max_size %d, max_body %d", maxSize, maxBody), func(t *testing.T) {
			tw := startTwin(t, fmt.Sprintf("request_body {\n\t\tmax_size %d\n\t}", maxSize), "", fmt.Sprintf("max_body %d", maxBody))
			for _, size := range []int{maxSize - 1, maxSize, maxSize + 1, 10 * maxSize} {
				c := bytesReq(fmt.Sprintf("%d bytes", size), "", padTo(size), nil)
				tw.check(t, c)
				c.chunked = true
				c.name += " chunked"
				tw.check(t, c)
			}
		})
	}
}

// A client that trickles its body does not hold up anyone else's
// selection: while one request is mid-body, with the policy reading it,
// another request is routed and answered.
func TestHostileSlowClientDoesNotBlockOthers(t *testing.T) {
	bs := newBackends(t, 2)
	port := startSites(t, 1, func(p []int) string { return proxySite(p[0], bs, "", "") })[0]
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)

	slow := chat("sys", words("slow", 2000))
	half := len(slow) / 2
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, pr) // chunked: a pipe has no length
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	// The client sends no byte of its body until Caddy's first read of
	// it asks for the rest with a 100 Continue: the policy's read, since
	// nothing before it in this site reads bodies.
	req.Header.Set("Expect", "100-continue")
	asked := make(chan struct{})
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got100Continue: func() { close(asked) },
	}))
	tr := &http.Transport{ExpectContinueTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(req)
		done <- result{resp, err}
	}()

	select {
	case <-asked:
	case r := <-done:
		t.Fatalf("the slow request ended before Caddy read its body: %v", r.err)
	}
	// Half the body: Write returns once the client's transport has taken
	// it, and the policy is still waiting for the rest.
	if _, err := pw.Write(slow[:half]); err != nil {
		t.Fatal(err)
	}

	// A policy that held anything shared while reading a body would make
	// these wait for the slow client, which waits for them: the timeout
	// turns that deadlock into a failure.
	defer pw.CloseWithError(errors.New("test over"))
	fast := &http.Client{Timeout: 10 * time.Second}
	before := counts(bs)
	for i := range 3 {
		post(t, fast, url, chat("sys", words(fmt.Sprintf("fast%d", i), 300)))
	}
	if got := sum(counts(bs)) - sum(before); got != 3 {
		t.Errorf("while the slow request was mid-body, the backends received %d requests, want the 3 fast ones", got)
	}
	select {
	case r := <-done:
		t.Fatalf("the slow request ended before its body was sent: %v", r.err)
	default:
	}

	if _, err := pw.Write(slow[half:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	io.Copy(io.Discard, r.resp.Body)
	r.resp.Body.Close()
	if r.resp.StatusCode != http.StatusOK {
		t.Fatalf("slow request: status %d", r.resp.StatusCode)
	}
	var last received
	for _, b := range bs {
		for _, got := range b.requests() {
			if got.size == len(slow) {
				last = got
			}
		}
	}
	if last.digest != digest(slow) {
		t.Errorf("the slow request's upstream received %d bytes (sha256 %.12s), want the client's %d (sha256 %.12s)", last.size, last.digest, len(slow), digest(slow))
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
