package caddymodule

import (
	"io"
	"mime"
	"net/http"
	"slices"
)

// readBody reads up to max_body bytes of r's body and puts them back in
// front of the rest, so the upstream receives the client's exact bytes.
// It leaves Content-Length and Transfer-Encoding as they are.
func (s *PrefixCacheSelection) readBody(r *http.Request) (skipCause, []byte) {
	switch {
	case r.Method != http.MethodPost:
		return skipMethod, nil
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		return skipEmpty, nil
	case !identityEncoding(r.Header.Values("Content-Encoding")):
		return skipEncoded, nil
	case !jsonContentType(r.Header.Get("Content-Type")):
		return skipContentType, nil
	case r.ContentLength > s.MaxBody:
		return skipTooLarge, nil
	}

	// One byte more than max_body tells a body of exactly max_body from a
	// larger one, and leaves room for the read that reports io.EOF.
	limit := s.MaxBody + 1
	buf, err := readAtMost(r.Body, limit, r.ContentLength+1)
	r.Body = &replayBody{head: buf, rest: r.Body, restErr: err}
	switch {
	case err != nil:
		return skipReadError, nil
	case int64(len(buf)) > s.MaxBody:
		return skipTooLarge, nil
	case len(buf) == 0:
		return skipEmpty, nil
	}
	return skipNone, buf
}

// firstRead is the most memory readBody allocates before the client has
// sent any of its body: a Content-Length is the client's word, and trusting
// it would let a client that declares max_body and sends nothing pin
// max_body of memory per connection.
const firstRead = 32 << 10

// readAtMost reads up to limit bytes from r. hint is the size the client
// declared, plus one for the read that reports io.EOF (0 or less when
// unknown); the buffer grows by doubling as bytes arrive, to at most hint
// while the body is no longer than declared, so a body that arrives
// whole costs about log2(size/firstRead) copies and memory proportional to
// the bytes received. It returns a nil error at io.EOF.
func readAtMost(r io.Reader, limit, hint int64) ([]byte, error) {
	size := int64(4 << 10) // a chunked body's first read
	if hint > 0 {
		size = hint
	}
	buf := make([]byte, 0, min(limit, firstRead, size))
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			next := min(2*int64(cap(buf)), limit)
			if hint > int64(cap(buf)) {
				next = min(next, hint)
			}
			buf = slices.Grow(buf, int(next)-len(buf))
		}
		m, err := r.Read(buf[len(buf):min(int64(cap(buf)), limit)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// replayBody gives back the bytes the policy read, then the rest of the
// client's body. Like Caddy's own body wrapper, it does not close the
// client's body if nothing has been read from it, so a retry after a dial
// error finds the body whole.
type replayBody struct {
	head    []byte
	off     int
	rest    io.ReadCloser
	restErr error // the error that stopped the policy's own read, if any
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
		if b.off == len(b.head) {
			// Replayed: a streamed response can last minutes, and the
			// body need not be held for it.
			b.head, b.off = nil, 0
		}
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

// identityEncoding reports whether the body is sent as it is.
func identityEncoding(values []string) bool {
	for _, v := range values {
		if v != "" && v != "identity" {
			return false
		}
	}
	return true
}

// jsonContentType accepts a missing type (clients that send JSON without
// saying so are common), application/json and any +json type, and
// text/plain, which some clients use to avoid CORS preflights.
func jsonContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/plain" ||
		(len(mt) > 5 && mt[len(mt)-5:] == "+json")
}
