package edgesync

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Kind says what a placement message reports.
type Kind uint8

const (
	// Placed: the edge chose Upstream for this prompt at selection time.
	// Tentative: the engine has not answered yet.
	Placed Kind = 1
	// Confirmed: the engine answered the request with a 2xx status.
	Confirmed Kind = 2
)

// String names the kind for logs and errors.
func (k Kind) String() string {
	switch k {
	case Placed:
		return "placed"
	case Confirmed:
		return "confirmed"
	case LoadKind:
		return "load"
	case FlushKind:
		return "flush"
	case ForgetKind:
		return "forget"
	case CatchUpKind:
		return "catch_up"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// The wire format, version 1. Every integer is little-endian.
//
//	offset  size  field
//	0       2     magic "PC"
//	2       1     version (1)
//	3       1     kind (1 placed, 2 confirmed)
//	4       8     origin
//	12      8     sent, unix nanoseconds (signed)
//	20      4     chunk size
//	24      8     scope
//	32      1     upstream length L (1..255)
//	33      L     upstream, printable ASCII
//	33+L    2     hash count N (1..65535)
//	35+L    8*N   hashes, shallowest first
//
// A message is HeaderSize + L + 8*N bytes: with a 14-byte Dial such as
// "10.0.0.11:8000", 113 bytes for 8 hashes (a 2 KB prompt at 256-byte
// chunks), 1073 for 128 (32 KB) and 8241 for 1024 (256 KB).
//
// Hashes are fixed 8-byte words: chained xxh3 values are uniform over 64
// bits, so a uvarint would take 9.5 bytes on average (half of all values
// need 10), more than the 8 it replaces (TestVarintCostsHashes measures it).
const (
	// Version is the wire format version this package writes and reads.
	// Receivers drop any other version.
	Version = 1

	// HeaderSize is the fixed part of a message: everything but the
	// upstream's bytes and the hashes.
	HeaderSize = 35

	// MaxUpstreamLen is the longest upstream Dial the format carries (its
	// length is one byte). A longer Dial, such as a 253-byte DNS name with
	// a port, is not shared: AppendBinary refuses the message.
	MaxUpstreamLen = 255

	// MaxWireHashes is the most hashes the format carries (the count is
	// two bytes).
	MaxWireHashes = 1<<16 - 1

	// MaxMessageSize is the largest message the format can express; a
	// transport drops anything larger unseen.
	MaxMessageSize = HeaderSize + MaxUpstreamLen + 8*MaxWireHashes

	// DefaultMaxHashes is the receivers' default cap on hashes per message:
	// prefixindex.DefaultMaxChunks, the most one request produces by
	// default. An edge with a larger max_chunks raises its Limits.
	DefaultMaxHashes = 2048
)

var magic = [2]byte{'P', 'C'}

// Errors that Decode wraps, one per way a message can be malformed, so a
// receiver can count drops by reason with errors.Is.
var (
	ErrTooLarge  = errors.New("edgesync: message too large")
	ErrTruncated = errors.New("edgesync: message truncated")
	ErrMagic     = errors.New("edgesync: not a placement message")
	ErrVersion   = errors.New("edgesync: unsupported version")
	ErrKind      = errors.New("edgesync: unknown kind")
	ErrUpstream  = errors.New("edgesync: invalid upstream")
	ErrHashes    = errors.New("edgesync: invalid hash count")
	ErrTrailing  = errors.New("edgesync: trailing bytes")
)

// Limits bound what a receiver accepts. A zero field takes its default.
type Limits struct {
	// Most hashes per message. Default: DefaultMaxHashes.
	MaxHashes int
	// Longest upstream Dial, in bytes. Default: MaxUpstreamLen.
	MaxUpstream int
	// Largest message, in bytes. Default: HeaderSize + MaxUpstream +
	// 8*MaxHashes, the largest message the other two allow.
	MaxBytes int
}

// withDefaults fills the zero fields.
func (l Limits) withDefaults() Limits {
	if l.MaxHashes <= 0 {
		l.MaxHashes = DefaultMaxHashes
	}
	if l.MaxUpstream <= 0 {
		l.MaxUpstream = MaxUpstreamLen
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = HeaderSize + min(l.MaxUpstream, MaxUpstreamLen) + 8*min(l.MaxHashes, MaxWireHashes)
	}
	return l
}

// Message is one placement: an edge chose Upstream for a prompt whose
// chained chunk hashes include Hashes.
type Message struct {
	// Origin is the publishing edge's random ID (see NewOrigin); receivers
	// drop their own echoes.
	Origin uint64
	// Sent is the publisher's clock in unix nanoseconds, for the lag metric.
	Sent int64
	Kind Kind
	// ChunkSize is the publisher's index shape; a receiver with another
	// chunk size drops the message, since its hashes name other prefixes.
	ChunkSize uint32
	// Scope is the tenant scope key chosen by the policy (0: no tenant).
	Scope uint64
	// Upstream is the chosen upstream's Caddy Dial string, such as
	// "10.0.0.11:8000": 1 to MaxUpstreamLen bytes of printable ASCII.
	Upstream string
	// Hashes are chained chunk hashes of one request, shallowest first: a
	// subset of its chain in ascending depth.
	Hashes []uint64
}

// Size is the encoded length of m: HeaderSize + len(Upstream) +
// 8*len(Hashes).
func (m *Message) Size() int {
	return HeaderSize + len(m.Upstream) + 8*len(m.Hashes)
}

// Check reports why m cannot be encoded, or nil.
func (m *Message) Check() error {
	switch {
	case m.Kind != Placed && m.Kind != Confirmed:
		return fmt.Errorf("%w: %v", ErrKind, m.Kind)
	case len(m.Upstream) == 0:
		return fmt.Errorf("%w: empty", ErrUpstream)
	case len(m.Upstream) > MaxUpstreamLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrUpstream, len(m.Upstream), MaxUpstreamLen)
	case !printable(m.Upstream):
		return fmt.Errorf("%w: a byte outside printable ASCII", ErrUpstream)
	case len(m.Hashes) == 0:
		return fmt.Errorf("%w: no hashes", ErrHashes)
	case len(m.Hashes) > MaxWireHashes:
		return fmt.Errorf("%w: %d, more than %d", ErrHashes, len(m.Hashes), MaxWireHashes)
	}
	return nil
}

// AppendBinary appends m's encoding to dst and returns the extended slice.
// It allocates only when dst lacks room, so a reused buffer makes it
// allocation-free. A message that Check refuses appends nothing: dst comes
// back unchanged.
func (m *Message) AppendBinary(dst []byte) []byte {
	if m.Check() != nil {
		return dst
	}
	dst = slices.Grow(dst, m.Size())
	dst = append(dst, magic[0], magic[1], Version, byte(m.Kind))
	dst = binary.LittleEndian.AppendUint64(dst, m.Origin)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(m.Sent))
	dst = binary.LittleEndian.AppendUint32(dst, m.ChunkSize)
	dst = binary.LittleEndian.AppendUint64(dst, m.Scope)
	dst = append(dst, byte(len(m.Upstream)))
	dst = append(dst, m.Upstream...)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(m.Hashes)))
	for _, h := range m.Hashes {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	return dst
}

// Decode parses b into m, reusing m.Hashes' storage (and m.Upstream when
// it is unchanged, so a stream of messages about a few upstreams decodes
// without allocating). It validates b against lim first: on error m is
// unchanged, and the error wraps one of ErrTooLarge, ErrTruncated,
// ErrMagic, ErrVersion, ErrKind, ErrUpstream, ErrHashes or ErrTrailing.
// Decode never panics and never keeps b.
func (m *Message) Decode(b []byte, lim Limits) error {
	lim = lim.withDefaults()
	if len(b) > lim.MaxBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), lim.MaxBytes)
	}
	if len(b) >= 2 && (b[0] != magic[0] || b[1] != magic[1]) {
		return fmt.Errorf("%w: starts with %#x", ErrMagic, b[:2])
	}
	if len(b) < HeaderSize {
		return fmt.Errorf("%w: %d bytes, header is %d", ErrTruncated, len(b), HeaderSize)
	}
	if b[2] != Version {
		return fmt.Errorf("%w: %d, want %d", ErrVersion, b[2], Version)
	}
	kind := Kind(b[3])
	if kind != Placed && kind != Confirmed {
		return fmt.Errorf("%w: %d", ErrKind, b[3])
	}
	ulen := int(b[32])
	switch {
	case ulen == 0:
		return fmt.Errorf("%w: empty", ErrUpstream)
	case ulen > lim.MaxUpstream:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrUpstream, ulen, lim.MaxUpstream)
	case len(b) < HeaderSize+ulen:
		return fmt.Errorf("%w: %d bytes, upstream needs %d", ErrTruncated, len(b), HeaderSize+ulen)
	}
	up := b[33 : 33+ulen]
	if !printable(up) {
		return fmt.Errorf("%w: a byte outside printable ASCII", ErrUpstream)
	}
	n := int(binary.LittleEndian.Uint16(b[33+ulen:]))
	switch {
	case n == 0:
		return fmt.Errorf("%w: no hashes", ErrHashes)
	case n > lim.MaxHashes:
		return fmt.Errorf("%w: %d, limit %d", ErrHashes, n, lim.MaxHashes)
	}
	want := HeaderSize + ulen + 8*n
	switch {
	case len(b) < want:
		return fmt.Errorf("%w: %d bytes, %d hashes need %d", ErrTruncated, len(b), n, want)
	case len(b) > want:
		return fmt.Errorf("%w: %d bytes after the message's %d", ErrTrailing, len(b)-want, want)
	}

	m.Kind = kind
	m.Origin = binary.LittleEndian.Uint64(b[4:])
	m.Sent = int64(binary.LittleEndian.Uint64(b[12:]))
	m.ChunkSize = binary.LittleEndian.Uint32(b[20:])
	m.Scope = binary.LittleEndian.Uint64(b[24:])
	if m.Upstream != string(up) {
		m.Upstream = string(up)
	}
	m.Hashes = slices.Grow(m.Hashes[:0], n)[:n]
	hb := b[HeaderSize+ulen:]
	for i := range m.Hashes {
		m.Hashes[i] = binary.LittleEndian.Uint64(hb[8*i:])
	}
	return nil
}

// printable reports whether s is printable ASCII (space to tilde), which
// every Dial string Caddy accepts is.
func printable[S string | []byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
