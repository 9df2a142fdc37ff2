package edgesync

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// goldenMessage and goldenHex pin wire format version 1. Edges of
// different versions talk to each other through it: if this test fails,
// the change breaks a mixed fleet, and needs a new Version instead.
var goldenMessage = Message{
	Origin:    0x0102030405060708,
	Sent:      1700000000123456789,
	Kind:      Placed,
	ChunkSize: 256,
	Scope:     0xa0a1a2a3a4a5a6a7,
	Upstream:  "10.0.0.11:8000",
	Hashes:    []uint64{0x1111111111111111, 0xfedcba9876543210},
}

const goldenHex = "5043 01 01" + // magic "PC", version 1, kind placed
	" 0807060504030201" + // origin
	" 15cd853dfe9c9717" + // sent
	" 00010000" + // chunk size 256
	" a7a6a5a4a3a2a1a0" + // scope
	" 0e 31302e302e302e31313a38303030" + // upstream: 14 bytes
	" 0200 1111111111111111 1032547698badcfe" // 2 hashes

func golden(t testing.TB) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(goldenHex, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGolden(t *testing.T) {
	want := golden(t)
	got := goldenMessage.AppendBinary(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendBinary(golden) =\n%x\nwant\n%x", got, want)
	}
	if n := goldenMessage.Size(); n != len(want) {
		t.Errorf("Size() = %d, want %d", n, len(want))
	}
	var m Message
	if err := m.Decode(want, Limits{}); err != nil {
		t.Fatalf("Decode(golden) = %v", err)
	}
	if !equal(&m, &goldenMessage) {
		t.Errorf("Decode(golden) = %+v, want %+v", m, goldenMessage)
	}
}

func equal(a, b *Message) bool {
	return a.Origin == b.Origin && a.Sent == b.Sent && a.Kind == b.Kind &&
		a.ChunkSize == b.ChunkSize && a.Scope == b.Scope &&
		a.Upstream == b.Upstream && slices.Equal(a.Hashes, b.Hashes)
}

// TestSize pins the bytes per message quoted in the docs: a 14-byte Dial
// and the hashes of 2 KB, 32 KB and 256 KB prompts at 256-byte chunks.
func TestSize(t *testing.T) {
	for _, tt := range []struct{ hashes, want int }{{8, 113}, {128, 1073}, {1024, 8241}} {
		m := sized(tt.hashes)
		if got := len(m.AppendBinary(nil)); got != tt.want {
			t.Errorf("len(AppendBinary(%d hashes)) = %d, want %d", tt.hashes, got, tt.want)
		}
	}
}

// sized returns a confirmed message with n random hashes and a 14-byte
// upstream.
func sized(n int) *Message {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	m := &Message{Origin: r.Uint64(), Sent: 1, Kind: Confirmed, ChunkSize: 256, Upstream: "10.0.0.11:8000"}
	for range n {
		m.Hashes = append(m.Hashes, r.Uint64())
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	long := strings.Repeat("a", MaxUpstreamLen)
	for _, tt := range []struct {
		name string
		m    Message
	}{
		{"golden", goldenMessage},
		{"confirmed, tenant", Message{Kind: Confirmed, Scope: 7, ChunkSize: 64, Upstream: "u:1", Hashes: []uint64{1}}},
		{"negative sent, zero origin", Message{Sent: -1, Kind: Placed, Upstream: "unix//run/e.sock", Hashes: []uint64{0, ^uint64(0)}}},
		{"longest upstream", Message{Kind: Placed, Upstream: long, Hashes: []uint64{3}}},
		{"default max hashes", *sized(DefaultMaxHashes)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.m.AppendBinary([]byte("prefix"))
			if !bytes.HasPrefix(b, []byte("prefix")) {
				t.Fatalf("AppendBinary clobbered dst: %q", b[:6])
			}
			var got Message
			if err := got.Decode(b[6:], Limits{}); err != nil {
				t.Fatalf("Decode(AppendBinary(%+v)) = %v", tt.m, err)
			}
			if !equal(&got, &tt.m) {
				t.Errorf("Decode(AppendBinary(m)) = %+v, want %+v", got, tt.m)
			}
		})
	}
}

func TestAppendRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		m    Message
		want error
	}{
		{"zero kind", Message{Upstream: "u:1", Hashes: []uint64{1}}, ErrKind},
		{"unknown kind", Message{Kind: 3, Upstream: "u:1", Hashes: []uint64{1}}, ErrKind},
		{"empty upstream", Message{Kind: Placed, Hashes: []uint64{1}}, ErrUpstream},
		{"long upstream", Message{Kind: Placed, Upstream: strings.Repeat("a", 256), Hashes: []uint64{1}}, ErrUpstream},
		{"control byte", Message{Kind: Placed, Upstream: "u:1\n", Hashes: []uint64{1}}, ErrUpstream},
		{"no hashes", Message{Kind: Placed, Upstream: "u:1"}, ErrHashes},
		{"too many hashes", Message{Kind: Placed, Upstream: "u:1", Hashes: make([]uint64, MaxWireHashes+1)}, ErrHashes},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.m.Check(); !errors.Is(err, tt.want) {
				t.Errorf("Check() = %v, want %v", err, tt.want)
			}
			dst := []byte("x")
			if got := tt.m.AppendBinary(dst); !bytes.Equal(got, dst) {
				t.Errorf("AppendBinary(%q) = %q, want dst unchanged", dst, got)
			}
		})
	}
}

// TestDecodeMalformed covers each way a message can be wrong, and that a
// failed Decode leaves the message as it was.
func TestDecodeMalformed(t *testing.T) {
	good := golden(t)
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tt := range []struct {
		name string
		b    []byte
		lim  Limits
		want error
	}{
		{"empty", nil, Limits{}, ErrTruncated},
		{"one byte", []byte{'P'}, Limits{}, ErrTruncated},
		{"bad magic", mod(func(b []byte) []byte { b[0] = 'X'; return b }), Limits{}, ErrMagic},
		{"bad magic, short", []byte("GET / HTTP/1.1"), Limits{}, ErrMagic},
		{"header cut", good[:HeaderSize-1], Limits{}, ErrTruncated},
		{"version 0", mod(func(b []byte) []byte { b[2] = 0; return b }), Limits{}, ErrVersion},
		{"version 2", mod(func(b []byte) []byte { b[2] = 2; return b }), Limits{}, ErrVersion},
		{"kind 0", mod(func(b []byte) []byte { b[3] = 0; return b }), Limits{}, ErrKind},
		{"kind 9", mod(func(b []byte) []byte { b[3] = 9; return b }), Limits{}, ErrKind},
		{"empty upstream", mod(func(b []byte) []byte { b[32] = 0; return b }), Limits{}, ErrUpstream},
		{"upstream over limit", good, Limits{MaxUpstream: 13}, ErrUpstream},
		{"upstream past end", mod(func(b []byte) []byte { b[32] = 200; return b }), Limits{}, ErrTruncated},
		{"upstream control byte", mod(func(b []byte) []byte { b[33] = 0; return b }), Limits{}, ErrUpstream},
		{"upstream high byte", mod(func(b []byte) []byte { b[34] = 0xc3; return b }), Limits{}, ErrUpstream},
		{"no hashes", mod(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[47:], 0); return b[:49] }), Limits{}, ErrHashes},
		{"hashes over limit", good, Limits{MaxHashes: 1}, ErrHashes},
		{"count above length", mod(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[47:], 3); return b }), Limits{}, ErrTruncated},
		{"hash cut", good[:len(good)-1], Limits{}, ErrTruncated},
		{"trailing byte", append(bytes.Clone(good), 0), Limits{}, ErrTrailing},
		{"over max bytes", good, Limits{MaxBytes: len(good) - 1}, ErrTooLarge},
		{"huge", make([]byte, 1<<20), Limits{}, ErrTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := Message{Upstream: "keep", Hashes: []uint64{42}}
			err := m.Decode(tt.b, tt.lim)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode(%x, %+v) = %v, want %v", tt.b, tt.lim, err, tt.want)
			}
			if m.Upstream != "keep" || !slices.Equal(m.Hashes, []uint64{42}) || m.Kind != 0 {
				t.Errorf("Decode(%x) failed but changed the message to %+v", tt.b, m)
			}
		})
	}
}

func TestDefaultLimits(t *testing.T) {
	l := Limits{}.withDefaults()
	if want := HeaderSize + MaxUpstreamLen + 8*DefaultMaxHashes; l.MaxBytes != want {
		t.Errorf("default MaxBytes = %d, want %d", l.MaxBytes, want)
	}
	// The largest message the defaults allow decodes.
	m := sized(DefaultMaxHashes)
	m.Upstream = strings.Repeat("h", MaxUpstreamLen)
	if err := new(Message).Decode(m.AppendBinary(nil), Limits{}); err != nil {
		t.Errorf("Decode(largest default message) = %v", err)
	}
	m.Hashes = append(m.Hashes, 1)
	if err := new(Message).Decode(m.AppendBinary(nil), Limits{}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Decode(one hash past the defaults) = %v, want %v", err, ErrTooLarge)
	}
}

// TestNoAllocs: encoding into a reused buffer and decoding into a reused
// message allocate nothing, so a subscriber applying a stream of messages
// about the same upstreams costs the garbage collector nothing.
func TestNoAllocs(t *testing.T) {
	m := sized(128)
	buf := m.AppendBinary(nil)
	if n := testing.AllocsPerRun(100, func() { buf = m.AppendBinary(buf[:0]) }); n != 0 {
		t.Errorf("AppendBinary into a reused buffer: %v allocs, want 0", n)
	}
	var got Message
	if err := got.Decode(buf, Limits{}); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = got.Decode(buf, Limits{}) }); n != 0 {
		t.Errorf("Decode into a reused message: %v allocs, want 0", n)
	}
}

// TestVarintCostsHashes is the measurement behind fixed 8-byte hashes:
// chained hashes are uniform 64-bit values, and their uvarints average
// about 9.5 bytes.
func TestVarintCostsHashes(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 3))
	const n = 100000
	var total int
	var buf [binary.MaxVarintLen64]byte
	for range n {
		total += binary.PutUvarint(buf[:], r.Uint64())
	}
	avg := float64(total) / n
	t.Logf("uvarint of a uniform uint64: %.3f bytes on average, fixed: 8", avg)
	if avg <= 8 {
		t.Errorf("uvarint averages %.3f bytes, no more than fixed 8: reconsider the format", avg)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Placed: "placed", Confirmed: "confirmed", 7: "kind(7)"} {
		if got := fmt.Sprint(k); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

func TestNewOrigin(t *testing.T) {
	a, b := NewOrigin(), NewOrigin()
	if a == 0 || a == b {
		t.Errorf("NewOrigin() = %#x, %#x: want nonzero and distinct", a, b)
	}
}
