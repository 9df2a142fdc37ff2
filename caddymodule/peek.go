package caddymodule

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
)

// readBody reads up to max_body bytes of r's body and puts them back in
// front of the rest, so the upstream receives the client's exact bytes.
// It leaves Content-Length and Transfer-Encoding as they are.
//
// The bytes returned live in a pooled buffer (bodyBuf, also returned when
// the bytes are) that goes back to its pool once the request is over and
// the upstream is done with the body; a reader of the bytes outside the
// attempt that read them must pin the buffer first.
func (s *PrefixCacheSelection) readBody(r *http.Request) (skipCause, []byte, *bodyBuf) {
	switch {
	case r.Method != http.MethodPost:
		return skipMethod, nil, nil
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		return skipEmpty, nil, nil
	case !identityEncoding(r.Header.Values("Content-Encoding")):
		return skipEncoded, nil, nil
	case !jsonContentType(r.Header.Get("Content-Type")):
		return skipContentType, nil, nil
	case r.ContentLength > s.MaxBody:
		return skipTooLarge, nil, nil
	}

	// One byte more than max_body tells a body of exactly max_body from a
	// larger one, and leaves room for the read that reports io.EOF.
	limit := s.MaxBody + 1
	bb, err := readAtMost(r.Body, limit, r.ContentLength+1)
	buf := bb.b
	rb := &replayBody{head: buf, buf: bb, rest: r.Body, restErr: err}
	if len(buf) == 0 {
		// Nothing to replay or to route on: the buffer can go back now.
		rb.head, rb.buf = nil, nil
		bb.put()
	} else {
		// The second of the two release conditions; the first is the
		// replay body's (bodyBuf).
		context.AfterFunc(r.Context(), bb.markCtxDone)
	}
	r.Body = rb
	switch {
	case err != nil:
		return skipReadError, nil, nil
	case int64(len(buf)) > s.MaxBody:
		return skipTooLarge, nil, nil
	case len(buf) == 0:
		return skipEmpty, nil, nil
	}
	return skipNone, buf, bb
}

// firstRead is the most memory readBody allocates before the client has
// sent any of its body: a Content-Length is the client's word, and trusting
// it would let a client that declares max_body and sends nothing pin
// max_body of memory per connection. Once firstRead bytes have arrived,
// the buffer grows straight to the declared length (plus one).
const firstRead = 32 << 10

// readAtMost reads up to limit bytes from r into a pooled buffer. hint is
// the size the client declared, plus one for the read that reports io.EOF
// (0 or less when unknown). The first buffer holds at most firstRead bytes;
// once it is full the buffer grows straight to hint (so a body that arrives
// whole and declared costs one copy of firstRead bytes, and the outgrown
// buffer goes back to its pool), and by doubling beyond it or without it,
// so memory stays proportional to the bytes received. It returns a nil
// error at io.EOF; the bytes read are the returned buffer's b.
func readAtMost(r io.Reader, limit, hint int64) (*bodyBuf, error) {
	size := int64(4 << 10) // a chunked body's first read
	if hint > 0 {
		size = hint
	}
	bb := getBodyBuf(int(min(limit, firstRead, size)))
	buf := bb.b[:0]
	var err error
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			next := min(2*int64(cap(buf)), limit)
			if hint > int64(cap(buf)) {
				next = min(limit, hint)
				if len(buf) < firstRead {
					next = min(next, 2*int64(cap(buf)))
				}
			}
			nb := getBodyBuf(int(next))
			nb.b = append(nb.b[:0], buf...)
			bb.put()
			bb, buf = nb, nb.b
		}
		var m int
		m, err = r.Read(buf[len(buf):min(int64(cap(buf)), limit)])
		buf = buf[:len(buf)+m]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			break
		}
	}
	bb.b = buf
	return bb, err
}

// errBodyReleased is what a read of a replay body gets after its buffer
// went back to the pool: only a reader outliving the request can see it.
var errBodyReleased = errors.New("prefix_cache: request body read after the request ended")

// replayBody gives back the bytes the policy read, then the rest of the
// client's body. Like Caddy's own body wrapper, it does not close the
// client's body if nothing has been read from it, so a retry after a dial
// error finds the body whole.
type replayBody struct {
	head    []byte
	off     int
	buf     *bodyBuf // head's pooled buffer; nil when not pooled
	rest    io.ReadCloser
	restErr error // the error that stopped the policy's own read, if any
	read    bool
}

func (b *replayBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	b.read = true
	// head and off belong to Read (reads never run concurrently); buf is
	// fixed at construction, because Close may run on another goroutine.
	if b.off < len(b.head) {
		bb := b.buf
		if bb != nil {
			// The buffer may be released meanwhile: copy under its lock.
			bb.mu.Lock()
			defer bb.mu.Unlock()
			if bb.released {
				return 0, errBodyReleased
			}
		}
		n := copy(p, b.head[b.off:])
		b.off += n
		if b.off == len(b.head) {
			// Replayed: a streamed response can last minutes, and the
			// body need not be held for it.
			b.head, b.off = nil, 0
			if bb != nil {
				bb.markBodyDoneLocked()
			}
		}
		return n, nil
	}
	if b.restErr != nil {
		return 0, b.restErr
	}
	return b.rest.Read(p)
}

func (b *replayBody) Close() error {
	if bb := b.buf; bb != nil {
		bb.markBodyDone()
	}
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
	switch ct {
	case "", "application/json", "application/json; charset=utf-8", "application/json;charset=utf-8", "application/json; charset=UTF-8":
		// What nearly every client sends, without ParseMediaType's map.
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/plain" ||
		(len(mt) > 5 && mt[len(mt)-5:] == "+json")
}
