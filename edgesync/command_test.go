package edgesync

import (
	"bytes"
	"errors"
	"testing"
)

// Commands round-trip; Check and Decode refuse what the format does not
// carry, each with its error.
func TestCommand(t *testing.T) {
	for _, c := range []Command{
		{Kind: FlushKind, Origin: 1, Sent: 2},
		{Kind: ForgetKind, Origin: 3, Sent: -4, Upstream: "10.0.0.11:8000"},
		{Kind: CatchUpKind, Origin: 5, Sent: 6},
	} {
		b := c.AppendBinary(nil)
		if len(b) != CommandHeaderSize+len(c.Upstream) {
			t.Errorf("AppendBinary(%+v) is %d bytes, want %d", c, len(b), CommandHeaderSize+len(c.Upstream))
		}
		if KindOf(b) != c.Kind {
			t.Errorf("KindOf(AppendBinary(%+v)) = %v", c, KindOf(b))
		}
		var got Command
		if err := got.Decode(b); err != nil || got != c {
			t.Errorf("Decode(AppendBinary(%+v)) = %+v, %v", c, got, err)
		}
	}
	for _, tt := range []struct {
		name string
		c    Command
		want error
	}{
		{"placement kind", Command{Kind: Placed}, ErrKind},
		{"forget of nothing", Command{Kind: ForgetKind}, ErrUpstream},
		{"flush naming an upstream", Command{Kind: FlushKind, Upstream: "a:1"}, ErrUpstream},
		{"control byte", Command{Kind: ForgetKind, Upstream: "a\n:1"}, ErrUpstream},
	} {
		if err := tt.c.Check(); !errors.Is(err, tt.want) {
			t.Errorf("%s: Check() = %v, want %v", tt.name, err, tt.want)
		}
		if b := tt.c.AppendBinary(nil); len(b) != 0 {
			t.Errorf("%s: AppendBinary = %x, want nothing", tt.name, b)
		}
	}
	forget := (&Command{Kind: ForgetKind, Upstream: "a:1"}).AppendBinary(nil)
	for _, tt := range []struct {
		name string
		b    []byte
		want error
	}{
		{"truncated", forget[:CommandHeaderSize], ErrTruncated},
		{"trailing", append(bytes.Clone(forget), 'x'), ErrTrailing},
		{"placement", append([]byte("PC\x01\x01"), make([]byte, 17)...), ErrKind},
		{"version", append([]byte("PC\x02\x04"), make([]byte, 17)...), ErrVersion},
		{"magic", []byte("XX"), ErrMagic},
	} {
		c := Command{Upstream: "before"}
		if err := c.Decode(tt.b); !errors.Is(err, tt.want) || c.Upstream != "before" {
			t.Errorf("%s: Decode = %v (upstream %q), want %v and the command unchanged", tt.name, err, c.Upstream, tt.want)
		}
	}
}

// FuzzCommandDecode: Decode never panics, and a command it accepts
// encodes back to exactly the same bytes.
func FuzzCommandDecode(f *testing.F) {
	f.Add((&Command{Kind: ForgetKind, Origin: 1, Sent: 2, Upstream: "10.0.0.11:8000"}).AppendBinary(nil))
	f.Add((&Command{Kind: FlushKind}).AppendBinary(nil))
	f.Add([]byte("PC\x01\x05"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Command
		if err := c.Decode(b); err != nil {
			return
		}
		if got := c.AppendBinary(nil); !bytes.Equal(got, b) {
			t.Fatalf("AppendBinary(Decode(%x)) = %x", b, got)
		}
	})
}

// SetSent rewrites the time of a message of every kind, and nothing else.
func TestSetSent(t *testing.T) {
	m := Message{Origin: 1, Sent: 2, Kind: Confirmed, ChunkSize: 256, Upstream: "a:1", Hashes: []uint64{3}}
	r := LoadReport{Origin: 1, Sent: 2, Upstreams: []UpstreamLoad{{Upstream: "a:1", Requests: 3}}}
	c := Command{Kind: FlushKind, Origin: 1, Sent: 2}
	for _, b := range [][]byte{m.AppendBinary(nil), r.AppendBinary(nil), c.AppendBinary(nil)} {
		if !SetSent(b, 99) {
			t.Fatalf("SetSent(%x) = false", b)
		}
		var gm Message
		var gr LoadReport
		var gc Command
		switch KindOf(b) {
		case Confirmed:
			if err := gm.Decode(b, Limits{}); err != nil || gm.Sent != 99 || gm.Origin != 1 || gm.Hashes[0] != 3 {
				t.Errorf("placement after SetSent: %+v, %v", gm, err)
			}
		case LoadKind:
			if err := gr.Decode(b, 0); err != nil || gr.Sent != 99 || gr.Upstreams[0].Requests != 3 {
				t.Errorf("load report after SetSent: %+v, %v", gr, err)
			}
		case FlushKind:
			if err := gc.Decode(b); err != nil || gc.Sent != 99 || gc.Origin != 1 {
				t.Errorf("command after SetSent: %+v, %v", gc, err)
			}
		}
	}
	if SetSent([]byte("PC\x01\x02short"), 1) || SetSent(make([]byte, 40), 1) {
		t.Errorf("SetSent accepted a message too short or not of this format")
	}
}
