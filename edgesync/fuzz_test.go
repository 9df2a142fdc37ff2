package edgesync

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds Decode arbitrary bytes: it never panics, a message it
// accepts respects the limits and encodes back to exactly the same bytes
// (the format has one encoding per message), and a failed Decode leaves
// the message alone.
func FuzzDecode(f *testing.F) {
	f.Add(golden(f))
	f.Add(sized(8).AppendBinary(nil))
	f.Add([]byte{})
	f.Add([]byte("PC\x01\x01"))
	lim := Limits{MaxHashes: 64, MaxUpstream: 32}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := Message{Upstream: "before", Hashes: make([]uint64, 0, 4)}
		if err := m.Decode(b, lim); err != nil {
			if m.Upstream != "before" || len(m.Hashes) != 0 {
				t.Fatalf("Decode(%x) = %v but changed the message to %+v", b, err, m)
			}
			return
		}
		if len(m.Hashes) > lim.MaxHashes || len(m.Upstream) > lim.MaxUpstream || len(m.Hashes) == 0 {
			t.Fatalf("Decode(%x) accepted %d hashes, %d-byte upstream past %+v", b, len(m.Hashes), len(m.Upstream), lim)
		}
		if got := m.AppendBinary(nil); !bytes.Equal(got, b) {
			t.Fatalf("AppendBinary(Decode(%x)) = %x", b, got)
		}
	})
}

// FuzzRoundTrip builds messages from arbitrary fields: whatever Check
// accepts decodes back to the same message, and whatever it refuses
// encodes to nothing.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint64(1), int64(2), uint8(1), uint32(256), uint64(0), "10.0.0.11:8000", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint64(0), int64(-1), uint8(2), uint32(0), uint64(9), "", []byte{})
	f.Fuzz(func(t *testing.T, origin uint64, sent int64, kind uint8, chunk uint32, scope uint64, upstream string, raw []byte) {
		m := Message{Origin: origin, Sent: sent, Kind: Kind(kind), ChunkSize: chunk, Scope: scope, Upstream: upstream}
		for i := 0; i+8 <= len(raw); i += 8 {
			m.Hashes = append(m.Hashes, uint64(raw[i])|uint64(raw[i+1])<<8|uint64(raw[i+7])<<56)
		}
		b := m.AppendBinary(nil)
		if m.Check() != nil {
			if len(b) != 0 {
				t.Fatalf("AppendBinary(%+v) = %x, want nothing (Check: %v)", m, b, m.Check())
			}
			return
		}
		if len(b) != m.Size() {
			t.Fatalf("len(AppendBinary(m)) = %d, Size() = %d", len(b), m.Size())
		}
		var got Message
		if err := got.Decode(b, Limits{MaxHashes: MaxWireHashes}); err != nil {
			t.Fatalf("Decode(AppendBinary(%+v)) = %v", m, err)
		}
		if !equal(&got, &m) {
			t.Fatalf("Decode(AppendBinary(m)) = %+v, want %+v", got, m)
		}
	})
}
