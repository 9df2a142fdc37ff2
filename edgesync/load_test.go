package edgesync

import (
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// TestLoadGolden pins the load report's encoding: edges of different
// versions read each other's.
func TestLoadGolden(t *testing.T) {
	r := LoadReport{Origin: 0x0102030405060708, Sent: 1, Upstreams: []UpstreamLoad{{"10.0.0.1:80", 3, 1000, 500}, {"", 9, 9, 9}, {"b:1", 0, 0, 1}}}
	got := hex.EncodeToString(r.AppendBinary(nil))
	entries := "5043" + "01" + "03" + // magic, version, kind
		"0807060504030201" + "0100000000000000" + // origin, sent
		"0200" + // two entries (the empty upstream is left out)
		"0b" + hex.EncodeToString([]byte("10.0.0.1:80")) + "03000000" + "e803000000000000" +
		"03" + hex.EncodeToString([]byte("b:1")) + "00000000" + "0000000000000000"
	want := entries + "f401000000000000" + "0100000000000000" // queued
	if got != want {
		t.Errorf("AppendBinary =\n%s\nwant\n%s", got, want)
	}
	// A report from an edge built before the queued section: the same
	// entries, each with nothing queued.
	old, err := hex.DecodeString(entries)
	if err != nil {
		t.Fatal(err)
	}
	var dec LoadReport
	if err := dec.Decode(old, 0); err != nil {
		t.Fatalf("a report without queued: %v", err)
	}
	wantOld := []UpstreamLoad{{"10.0.0.1:80", 3, 1000, 0}, {"b:1", 0, 0, 0}}
	if !reflect.DeepEqual(dec.Upstreams, wantOld) {
		t.Errorf("a report without queued decodes to %+v, want %+v", dec.Upstreams, wantOld)
	}
	if n := len(r.AppendBinary(nil)); n != 22+2*21+11+3 {
		t.Errorf("report of 2 entries is %d bytes", n)
	}
	eight := LoadReport{}
	for range 8 {
		eight.Upstreams = append(eight.Upstreams, UpstreamLoad{Upstream: "10.0.0.11:8000"})
	}
	if n := len(eight.AppendBinary(nil)); n != 302 {
		t.Errorf("a report of 8 upstreams with 14-byte Dials is %d bytes, the docs say 302", n)
	}
	if KindOf(r.AppendBinary(nil)) != LoadKind {
		t.Error("KindOf(a load report) is not LoadKind")
	}
}

func TestLoadRoundTrip(t *testing.T) {
	r := LoadReport{Origin: 42, Sent: -7, Upstreams: []UpstreamLoad{{"10.0.0.11:8000", 17, 1 << 40, 1 << 39}, {"engine-2.svc:8000", 0, 5, 0}}}
	var got LoadReport
	if err := got.Decode(r.AppendBinary(nil), 0); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("Decode(AppendBinary(%+v)) = %+v", r, got)
	}
	empty := LoadReport{Origin: 1}
	if err := got.Decode(empty.AppendBinary(nil), 0); err != nil || len(got.Upstreams) != 0 {
		t.Errorf("an empty report: %v, %+v", err, got)
	}
}

func TestLoadDecodeErrors(t *testing.T) {
	good := (&LoadReport{Origin: 1, Upstreams: []UpstreamLoad{{"a:1", 1, 1, 1}, {"b:2", 2, 2, 2}}}).AppendBinary(nil)
	placement := (&Message{Origin: 1, Kind: Placed, ChunkSize: 256, Upstream: "a:1", Hashes: []uint64{1}}).AppendBinary(nil)
	for _, tt := range []struct {
		name string
		b    []byte
		max  int
		want error
	}{
		{"truncated header", good[:10], 0, ErrTruncated},
		{"truncated entry", good[:len(good)-16-3], 0, ErrTruncated},
		{"trailing", append(append([]byte{}, good...), 0), 0, ErrTrailing},
		{"queued cut short", good[:len(good)-3], 0, ErrTrailing},
		{"magic", append([]byte("XX"), good[2:]...), 0, ErrMagic},
		{"a placement", placement, 0, ErrKind},
		{"too many", good, 1, ErrHashes},
		{"unprintable", func() []byte { b := append([]byte{}, good...); b[LoadHeaderSize+1] = 0x01; return b }(), 0, ErrUpstream},
	} {
		var r LoadReport
		if err := r.Decode(tt.b, tt.max); !errors.Is(err, tt.want) {
			t.Errorf("%s: Decode error %v, want %v", tt.name, err, tt.want)
		}
	}
}

// FuzzLoadDecode: any input either fails to decode or re-encodes to the
// same bytes; it never panics.
func FuzzLoadDecode(f *testing.F) {
	f.Add((&LoadReport{Origin: 3, Upstreams: []UpstreamLoad{{"10.0.0.1:8000", 4, 4096, 100}}}).AppendBinary(nil))
	f.Add([]byte("PC\x01\x03"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r LoadReport
		if r.Decode(b, 0) != nil {
			return
		}
		// Re-encoded with the queued section, which b may lack.
		again := r.AppendBinary(nil)
		if string(again) != string(b) && string(again) != string(b)+string(make([]byte, 8*len(r.Upstreams))) {
			t.Fatalf("decoded %x, re-encoded %x", b, again)
		}
	})
}

// A report of more upstreams than the format carries encodes the first
// MaxLoadUpstreams it can name, each with its queued text.
func TestLoadAppendCapsEntries(t *testing.T) {
	var r LoadReport
	r.Upstreams = append(r.Upstreams, UpstreamLoad{Upstream: "", Queued: 99}) // cannot be named: left out
	for i := range MaxLoadUpstreams + 10 {
		r.Upstreams = append(r.Upstreams, UpstreamLoad{Upstream: fmt.Sprintf("u:%d", i), Queued: uint64(i)})
	}
	var got LoadReport
	if err := got.Decode(r.AppendBinary(nil), 0); err != nil {
		t.Fatal(err)
	}
	if len(got.Upstreams) != MaxLoadUpstreams {
		t.Fatalf("%d entries decoded, want %d", len(got.Upstreams), MaxLoadUpstreams)
	}
	last := got.Upstreams[MaxLoadUpstreams-1]
	if got.Upstreams[0].Upstream != "u:0" || got.Upstreams[0].Queued != 0 ||
		last.Upstream != fmt.Sprintf("u:%d", MaxLoadUpstreams-1) || last.Queued != MaxLoadUpstreams-1 {
		t.Errorf("first %+v, last %+v", got.Upstreams[0], last)
	}
}
