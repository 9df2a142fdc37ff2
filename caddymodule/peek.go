package caddymodule

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/prefixcache/caddy-prefixcache/dialect"
)

// readBody reads up to maxBody bytes of r's body and puts them back in
// front of the rest, so the upstream receives the client's exact bytes.
// It leaves Content-Length and Transfer-Encoding as they are, and reads
// nothing of a body it would not route on: not a POST, empty, incremental
// (Caddy streams it, and so does the policy), compressed, not JSON, or
// declared larger than maxBody or than the body budget has left.
//
// The bytes returned live in a pooled buffer (bodyBuf, also returned) that
// goes back to its pool as bodypool.go says; keep says whether a retry may
// ask for the body again after it was sent (reuse.go). The replay body
// installed as r.Body is returned too, for a retry to rewind.
func readBody(r *http.Request, maxBody, budget int64, keep bool) (skipCause, []byte, *bodyBuf, *replayBody) {
	if cause := unreadable(r, maxBody); cause != skipNone {
		return cause, nil, nil, nil
	}
	if r.ContentLength > 0 && !fits(bodyInUse.Load()+int64(capacityFor(int(r.ContentLength))), budget) {
		return skipBudget, nil, nil, nil
	}

	// One byte more than max_body tells a body of exactly max_body from a
	// larger one.
	bb, past, err := readAtMost(r.Body, maxBody+1, r.ContentLength, budget)
	if bb == nil { // not even the first buffer fit: nothing was read
		return skipBudget, nil, nil, nil
	}
	buf := bb.b
	rb := &replayBody{buf: bb, head: buf, rest: r.Body}
	if len(past) > 0 {
		rb.rest = &pastBody{past: past, ReadCloser: r.Body}
	}
	switch {
	case errors.Is(err, errBudget):
		// The rest of the body follows what was read, untouched.
	case err != nil:
		rb.restErr = err
	case int64(len(buf)) <= maxBody:
		rb.whole = true
	}
	if len(buf) == 0 {
		// Nothing to replay or to route on: the buffer can go back now.
		rb.head, rb.buf = nil, nil
		bb.put()
	} else {
		// Only a whole body can be replayed again on a retry.
		bb.keep = keep && rb.whole
	}
	r.Body = rb
	switch {
	case errors.Is(err, errBudget):
		return skipBudget, nil, nil, rb
	case err != nil:
		return skipReadError, nil, nil, rb
	case int64(len(buf)) > maxBody:
		return skipTooLarge, nil, nil, rb
	case len(buf) == 0:
		return skipEmpty, nil, nil, rb
	}
	return skipNone, buf, bb, rb
}

// unreadable returns why r's headers say its body will not be read, or
// skipNone: not a POST, empty, incremental, compressed, not JSON, or
// declared larger than maxBody.
func unreadable(r *http.Request, maxBody int64) skipCause {
	switch {
	case r.Method != http.MethodPost:
		return skipMethod
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		return skipEmpty
	case caddyhttp.IsIncremental(r.Header):
		return skipIncremental
	case !dialect.IdentityEncoding(r.Header.Values("Content-Encoding")):
		return skipEncoded
	case !dialect.JSONMediaType(r.Header.Get("Content-Type")):
		return skipContentType
	case r.ContentLength > maxBody:
		return skipTooLarge
	}
	return skipNone
}

// firstRead is the most memory readBody allocates before the client has
// sent any of its body. After it, a buffer grows only once it is full, to
// at most twice its size, so the memory a body holds is never more than
// max(firstRead, 2 x the bytes received) (before the size class's
// rounding, which the budget charges): a Content-Length is the client's
// word, and a client that declares max_body and sends a little, or
// nothing, pins no more than it sent.
const firstRead = 16 << 10

// errBudget stops a read whose next buffer would take the held body bytes
// past the budget.
var errBudget = errors.New("prefix_cache: body budget reached")

// readAtMost reads up to limit bytes from r into a pooled buffer within
// the body budget. declared is the length the client declared (-1 when
// unknown). It returns a nil error at io.EOF, errBudget when the next
// buffer did not fit within budget (the bytes read so far are in the
// returned buffer, and past holds the byte read beyond them, if any), and
// a nil buffer when not even the first one fit. The bytes read are the
// returned buffer's b, then past.
func readAtMost(r io.Reader, limit, declared, budget int64) (bb *bodyBuf, past []byte, err error) {
	size := min(firstRead, limit)
	if declared > 0 {
		size = min(size, declared)
	}
	bb = getBodyBuf(int(size), budget)
	if bb == nil {
		return nil, nil, errBudget
	}
	buf := bb.b[:0]
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			var one [1]byte
			probed := false
			if declared >= 0 && int64(len(buf)) >= declared {
				// All that was declared is here: ask for the end of the
				// body without growing the buffer for it.
				var m int
				m, err = r.Read(one[:])
				if m == 0 {
					if err == nil {
						continue
					}
					break
				}
				probed = true
			}
			next := min(2*int64(cap(buf)), limit)
			if declared > int64(cap(buf)) {
				next = min(next, declared)
			}
			nb := getBodyBuf(int(next), budget)
			if nb == nil {
				bb.b = buf
				if probed {
					// The byte past the declared length is the client's
					// too; a read error after it comes again from r.
					past = one[:]
				}
				return bb, past, errBudget
			}
			nb.b = append(nb.b[:0], buf...)
			bb.put()
			bb, buf = nb, nb.b
			if probed {
				buf = append(buf, one[0]) // a byte past the declared length
				if err != nil {
					break
				}
			}
			continue
		}
		var m int
		m, err = r.Read(buf[len(buf):min(int64(cap(buf)), limit)])
		buf = buf[:len(buf)+m]
		if err != nil {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	bb.b = buf
	return bb, nil, err
}

// pastBody is the client's body behind bytes the policy read from it but
// could not keep in its buffer.
type pastBody struct {
	past []byte
	io.ReadCloser
}

func (p *pastBody) Read(b []byte) (int, error) {
	if len(p.past) > 0 {
		n := copy(b, p.past)
		p.past = p.past[n:]
		return n, nil
	}
	return p.ReadCloser.Read(b)
}

// errBodyReleased is what a read of a replay body gets after its buffer
// went back to the pool: only a reader outliving the request can see it.
var errBodyReleased = errors.New("prefix_cache: request body read after the request ended")

// replayBody gives back the bytes the policy read, then the rest of the
// client's body. Like Caddy's own body wrapper, it does not close the
// client's body if nothing has been read from it, so a retry after a dial
// error finds the body whole. A whole body (one the policy read to its
// end) can be rewound for a retry that comes after it was sent.
//
// Read and Close may run on different goroutines (an HTTP/2 transport
// closes a body it is still reading when the stream is reset); mu guards
// the state they share, and is never held while reading the client.
type replayBody struct {
	mu      sync.Mutex
	buf     *bodyBuf // head's pooled buffer; nil when nothing was read
	head    []byte
	off     int
	whole   bool // head is the whole body: rest was read to its end
	rest    io.ReadCloser
	restErr error // the error that stopped the policy's own read, if any
	read    bool  // a reader has read from this body since the last rewind
}

func (b *replayBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	b.mu.Lock()
	b.read = true
	if b.off < len(b.head) {
		defer b.mu.Unlock()
		if bb := b.buf; bb != nil {
			bb.mu.Lock()
			defer bb.mu.Unlock()
			if bb.released {
				return 0, errBodyReleased
			}
		}
		n := copy(p, b.head[b.off:])
		b.off += n
		if b.off == len(b.head) && b.buf != nil {
			// The transport has all the policy read: a streamed
			// response can last minutes, and the body need not be held
			// for it unless a retry may ask for it again.
			b.buf.markSentLocked()
		}
		return n, nil
	}
	whole, restErr := b.whole, b.restErr
	b.mu.Unlock()
	switch {
	case whole:
		return 0, io.EOF
	case restErr != nil:
		return 0, restErr
	}
	return b.rest.Read(p)
}

func (b *replayBody) Close() error {
	b.mu.Lock()
	read, bb := b.read, b.buf
	b.mu.Unlock()
	if !read {
		// Not read: a retry after a dial error reads it from the start.
		return nil
	}
	if bb != nil {
		bb.mu.Lock()
		bb.markSentLocked()
		bb.mu.Unlock()
	}
	return b.rest.Close()
}

// again returns a new replay of the whole body, from its start, for a
// retry of a request whose body may have been sent already (Caddy retries
// after a response matched lb_retry_match). It shares the buffer, so a
// transport of the earlier attempt still reading the old replay reads the
// same bytes. It returns nil unless the body is whole and still held.
func (b *replayBody) again() *replayBody {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.whole || b.buf == nil || b.buf.isReleased() {
		return nil
	}
	return &replayBody{buf: b.buf, head: b.head, whole: true, rest: http.NoBody}
}
