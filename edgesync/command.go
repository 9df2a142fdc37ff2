package edgesync

import (
	"encoding/binary"
	"fmt"
)

// Commands are what an edge asks of the others rather than tells them:
// an operator's flush or forget, made through one edge's admin API, and a
// joining edge's request for the others' recent placements. They share
// the placement messages' header and channel.
const (
	// FlushKind: forget every placement, as the admin API's flush does.
	FlushKind Kind = 4
	// ForgetKind: forget what Upstream was believed to hold, as the
	// admin API's forget does.
	ForgetKind Kind = 5
	// CatchUpKind: the sender has just subscribed (it started, or
	// reconnected) and asks the others to publish their recent
	// placements again.
	CatchUpKind Kind = 6
)

// The command's layout, version 1:
//
//	offset  size  field
//	0       2     magic "PC"
//	2       1     version (1)
//	3       1     kind (4 flush, 5 forget, 6 catch-up)
//	4       8     origin
//	12      8     sent, unix nanoseconds (signed)
//	20      1     upstream length L (1..255 for forget, 0 otherwise)
//	21      L     upstream, printable ASCII
//
// A flush or catch-up is CommandHeaderSize bytes; a forget of a 14-byte
// Dial, 35.
const CommandHeaderSize = 21

// Command is one flush, forget or catch-up request.
type Command struct {
	Kind Kind
	// Origin is the sending edge's ID (NewOrigin).
	Origin uint64
	// Sent is the sender's clock in unix nanoseconds: receivers refuse a
	// command much older or newer than their own clock, and one they
	// have applied already, so that a captured command cannot be sent
	// again later.
	Sent int64
	// Upstream is the Dial a forget names; empty for the other kinds.
	Upstream string
}

// IsCommand reports whether k is the kind of a Command.
func IsCommand(k Kind) bool { return k == FlushKind || k == ForgetKind || k == CatchUpKind }

// Check reports why c cannot be encoded, or nil.
func (c *Command) Check() error {
	switch {
	case !IsCommand(c.Kind):
		return fmt.Errorf("%w: %v is not a command", ErrKind, c.Kind)
	case c.Kind == ForgetKind && !okUpstream(c.Upstream):
		return fmt.Errorf("%w: a forget names 1 to %d bytes of printable ASCII, got %d bytes", ErrUpstream, MaxUpstreamLen, len(c.Upstream))
	case c.Kind != ForgetKind && c.Upstream != "":
		return fmt.Errorf("%w: only a forget names an upstream", ErrUpstream)
	}
	return nil
}

// AppendBinary appends c's encoding to dst; a command that Check refuses
// appends nothing.
func (c *Command) AppendBinary(dst []byte) []byte {
	if c.Check() != nil {
		return dst
	}
	dst = append(dst, magic[0], magic[1], Version, byte(c.Kind))
	dst = binary.LittleEndian.AppendUint64(dst, c.Origin)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(c.Sent))
	dst = append(dst, byte(len(c.Upstream)))
	return append(dst, c.Upstream...)
}

// Decode parses b into c. On error c is unchanged, and the error wraps one
// of ErrMagic, ErrTruncated, ErrVersion, ErrKind, ErrUpstream or
// ErrTrailing. It never panics and never keeps b.
func (c *Command) Decode(b []byte) error {
	if len(b) >= 2 && (b[0] != magic[0] || b[1] != magic[1]) {
		return fmt.Errorf("%w: starts with %#x", ErrMagic, b[:2])
	}
	if len(b) < CommandHeaderSize {
		return fmt.Errorf("%w: %d bytes, header is %d", ErrTruncated, len(b), CommandHeaderSize)
	}
	if b[2] != Version {
		return fmt.Errorf("%w: %d, want %d", ErrVersion, b[2], Version)
	}
	kind := Kind(b[3])
	if !IsCommand(kind) {
		return fmt.Errorf("%w: %d, not a command", ErrKind, b[3])
	}
	l := int(b[20])
	switch {
	case len(b) < CommandHeaderSize+l:
		return fmt.Errorf("%w: %d bytes, upstream needs %d", ErrTruncated, len(b), CommandHeaderSize+l)
	case len(b) > CommandHeaderSize+l:
		return fmt.Errorf("%w: %d bytes after the command's %d", ErrTrailing, len(b)-CommandHeaderSize-l, CommandHeaderSize+l)
	case kind == ForgetKind && l == 0:
		return fmt.Errorf("%w: a forget names no upstream", ErrUpstream)
	case kind != ForgetKind && l != 0:
		return fmt.Errorf("%w: only a forget names an upstream", ErrUpstream)
	}
	up := b[CommandHeaderSize:]
	if !printable(up) {
		return fmt.Errorf("%w: a byte outside printable ASCII", ErrUpstream)
	}
	c.Kind = kind
	c.Origin = binary.LittleEndian.Uint64(b[4:])
	c.Sent = int64(binary.LittleEndian.Uint64(b[12:]))
	if c.Upstream != string(up) {
		c.Upstream = string(up)
	}
	return nil
}
