package peers

import (
	"io"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/prefixcache/caddy-prefixcache/dialect"
)

// maxBody is the largest request body the peers read, prefix_cache's
// default max_body.
const maxBody = 4 << 20

// varKey names the request variable holding what the peers read from the
// body. Caddy's cloned request shares the original's variables, so a retry
// finds it there and does not read the body again.
const varKey = "bench_peers.request"

// request is what the peers learn from one request's body.
type request struct {
	ok        bool         // the body is a request of a known dialect
	text      []byte       // its routing text
	model     string       // the top-level "model"
	kind      dialect.Kind // its dialect
	placement int          // length of the placement key (see dialect.Request)
	body      []byte       // the body as sent, for routers that tokenize it
}

// routingText returns what the peers need to route r, read from the body
// once per request.
func routingText(r *http.Request) *request {
	if p, ok := caddyhttp.GetVar(r.Context(), varKey).(*request); ok {
		return p
	}
	p := &request{}
	if body := readBody(r, maxBody); body != nil {
		text, req, err := dialect.Append(nil, body)
		if err == nil {
			p.ok = true
			p.text = text
			p.model = string(req.Model)
			p.kind = req.Kind
			p.placement = req.Placement
			p.body = body
		}
	}
	caddyhttp.SetVar(r.Context(), varKey, p)
	return p
}

// readBody returns r's body if it is a POST with a JSON-ish body of at
// most limit bytes, and puts the bytes it read back in front of the rest,
// so the upstream receives the client's exact bytes. It leaves
// Content-Length and Transfer-Encoding as they are. The media type and
// encoding it reads are prefix_cache's (dialect.JSONMediaType,
// dialect.IdentityEncoding). The reading is its own, not caddymodule's
// peek: that one lends a pooled buffer within the process's body budget
// and takes it back once the engine has read the body, while the peers
// keep the body for the routers that tokenize it (one allocation per
// request is fine in a benchmark).
func readBody(r *http.Request, limit int64) []byte {
	switch {
	case r.Method != http.MethodPost,
		r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0,
		!dialect.IdentityEncoding(r.Header.Values("Content-Encoding")),
		!dialect.JSONMediaType(r.Header.Get("Content-Type")),
		r.ContentLength > limit:
		return nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	r.Body = &replayBody{head: buf, rest: r.Body, restErr: err}
	if err != nil || int64(len(buf)) > limit || len(buf) == 0 {
		return nil
	}
	return buf
}

// replayBody gives back the bytes read, then the rest of the client's
// body. Copied from caddymodule/peek.go (which exports nothing): it does
// not close the client's body if nothing has been read from it, so a retry
// after a dial error finds the body whole.
type replayBody struct {
	head    []byte
	off     int
	rest    io.ReadCloser
	restErr error // the error that stopped our own read, if any
	read    bool
}

func (b *replayBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	b.read = true
	if b.off < len(b.head) {
		n := copy(p, b.head[b.off:])
		b.off += n
		return n, nil
	}
	if b.restErr != nil {
		return 0, b.restErr
	}
	return b.rest.Read(p)
}

func (b *replayBody) Close() error {
	if !b.read {
		return nil
	}
	return b.rest.Close()
}
