package edgesync

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// LoadKind is the kind byte of a load report: an edge's requests and
// prompt bytes in flight at each upstream, published a few times a second,
// so that every edge bounds each upstream by the whole tier's load rather
// than by its own share of it. It shares the placement messages' header
// (magic, version, kind, origin, sent) and channel.
const LoadKind Kind = 3

// The load report's layout, version 1, after the common header:
//
//	offset  size  field
//	0       2     magic "PC"
//	2       1     version (1)
//	3       1     kind (3)
//	4       8     origin
//	12      8     sent, unix nanoseconds (signed)
//	20      2     upstream count N (0..MaxLoadUpstreams)
//	22      ...   N entries: upstream length L (1..255), upstream (L bytes,
//	              printable ASCII), requests (4), bytes (8)
//	...     8*N   optional: each entry's queued (8), in entry order
//
// A report is LoadHeaderSize + the sum over entries of (13 + L) bytes,
// plus 8 per entry with the queued section: 302 bytes for 8 upstreams
// with 14-byte Dials. AppendBinary always writes the queued section;
// Decode also accepts reports without it (their Queued are 0), as edges
// built before it send them. Those edges drop a report that has it
// (trailing bytes), so while a tier is upgraded its older edges bound by
// their own load and the older edges' reports.
const (
	LoadHeaderSize = 22

	// MaxLoadUpstreams bounds the upstreams one report names; a receiver
	// takes at most its own pool's worth anyway.
	MaxLoadUpstreams = 4096
)

// UpstreamLoad is one upstream's load as one edge sees it.
type UpstreamLoad struct {
	Upstream string
	// Requests in flight from the edge to the upstream.
	Requests uint32
	// Bytes of routing text of those requests.
	Bytes uint64
	// Queued counts the bytes of routing text the edge has sent the
	// upstream that it did not believe the upstream held: prefill it
	// gave the upstream to do, since the edge made its index. It only
	// grows; another edge adds its growth between two reports to its
	// own model of the upstream's prefill queue.
	Queued uint64
}

// LoadReport is what one edge has in flight at each upstream.
type LoadReport struct {
	Origin    uint64
	Sent      int64
	Upstreams []UpstreamLoad
}

// KindOf returns the kind of an encoded message, or 0 if b is too short
// to have one or is not a message of this format.
func KindOf(b []byte) Kind {
	if len(b) < 4 || b[0] != magic[0] || b[1] != magic[1] {
		return 0
	}
	return Kind(b[3])
}

// SetSent sets the time of an encoded message of any kind (a placement,
// a load report or a command, which all carry it at the same offset) to
// sent, in place, and reports whether b is long enough to have one: an
// edge sending a message again says when it does.
func SetSent(b []byte, sent int64) bool {
	if len(b) < 20 || b[0] != magic[0] || b[1] != magic[1] {
		return false
	}
	binary.LittleEndian.PutUint64(b[12:], uint64(sent))
	return true
}

// AppendBinary appends r's encoding to dst. Entries whose upstream cannot
// be encoded (empty, too long, not printable) are left out, as are those
// past MaxLoadUpstreams.
func (r *LoadReport) AppendBinary(dst []byte) []byte {
	n := 0
	for range r.entries {
		n++
	}
	dst = append(dst, magic[0], magic[1], Version, byte(LoadKind))
	dst = binary.LittleEndian.AppendUint64(dst, r.Origin)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Sent))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(n))
	for u := range r.entries {
		dst = append(dst, byte(len(u.Upstream)))
		dst = append(dst, u.Upstream...)
		dst = binary.LittleEndian.AppendUint32(dst, u.Requests)
		dst = binary.LittleEndian.AppendUint64(dst, u.Bytes)
	}
	for u := range r.entries {
		dst = binary.LittleEndian.AppendUint64(dst, u.Queued)
	}
	return dst
}

// entries yields the upstreams AppendBinary encodes, in order: those
// whose name it can encode, at most MaxLoadUpstreams of them.
func (r *LoadReport) entries(yield func(*UpstreamLoad) bool) {
	n := 0
	for i := range r.Upstreams {
		u := &r.Upstreams[i]
		if !okUpstream(u.Upstream) {
			continue
		}
		if n == MaxLoadUpstreams || !yield(u) {
			return
		}
		n++
	}
}

func okUpstream(s string) bool {
	return len(s) > 0 && len(s) <= MaxUpstreamLen && printable(s)
}

// Decode parses b into r, reusing r.Upstreams' storage (and each entry's
// Upstream string when it is unchanged). It accepts at most maxUpstreams
// entries (0: MaxLoadUpstreams). On error r is unchanged, and the error
// wraps one of ErrTruncated, ErrMagic, ErrVersion, ErrKind, ErrUpstream,
// ErrHashes (too many entries) or ErrTrailing. It never panics.
func (r *LoadReport) Decode(b []byte, maxUpstreams int) error {
	if maxUpstreams <= 0 || maxUpstreams > MaxLoadUpstreams {
		maxUpstreams = MaxLoadUpstreams
	}
	if len(b) >= 2 && (b[0] != magic[0] || b[1] != magic[1]) {
		return fmt.Errorf("%w: starts with %#x", ErrMagic, b[:2])
	}
	if len(b) < LoadHeaderSize {
		return fmt.Errorf("%w: %d bytes, header is %d", ErrTruncated, len(b), LoadHeaderSize)
	}
	if b[2] != Version {
		return fmt.Errorf("%w: %d, want %d", ErrVersion, b[2], Version)
	}
	if Kind(b[3]) != LoadKind {
		return fmt.Errorf("%w: %d, not a load report", ErrKind, b[3])
	}
	n := int(binary.LittleEndian.Uint16(b[20:]))
	if n > maxUpstreams {
		return fmt.Errorf("%w: %d upstreams, limit %d", ErrHashes, n, maxUpstreams)
	}
	// Validate every entry before touching r.
	off := LoadHeaderSize
	for i := range n {
		if off >= len(b) {
			return fmt.Errorf("%w: entry %d missing", ErrTruncated, i)
		}
		l := int(b[off])
		if l == 0 {
			return fmt.Errorf("%w: entry %d empty", ErrUpstream, i)
		}
		if off+1+l+12 > len(b) {
			return fmt.Errorf("%w: entry %d cut short", ErrTruncated, i)
		}
		if !printable(b[off+1 : off+1+l]) {
			return fmt.Errorf("%w: entry %d has a byte outside printable ASCII", ErrUpstream, i)
		}
		off += 1 + l + 12
	}
	queued := -1 // no queued section
	if off != len(b) {
		if len(b)-off != 8*n {
			return fmt.Errorf("%w: %d bytes after the report's %d entries, want 0 or %d", ErrTrailing, len(b)-off, n, 8*n)
		}
		queued = off
	}
	r.Origin = binary.LittleEndian.Uint64(b[4:])
	r.Sent = int64(binary.LittleEndian.Uint64(b[12:]))
	r.Upstreams = slices.Grow(r.Upstreams[:0], n)[:n]
	off = LoadHeaderSize
	for i := range r.Upstreams {
		l := int(b[off])
		up := b[off+1 : off+1+l]
		u := &r.Upstreams[i]
		if u.Upstream != string(up) {
			u.Upstream = string(up)
		}
		u.Requests = binary.LittleEndian.Uint32(b[off+1+l:])
		u.Bytes = binary.LittleEndian.Uint64(b[off+1+l+4:])
		u.Queued = 0
		if queued >= 0 {
			u.Queued = binary.LittleEndian.Uint64(b[queued+8*i:])
		}
		off += 1 + l + 12
	}
	return nil
}
