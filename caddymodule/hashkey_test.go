package caddymodule

import (
	"bytes"
	"testing"
)

// A sealed message opens under the same key, and not once a byte of it
// changed, under another key, or cut short.
func TestSyncAuth(t *testing.T) {
	keys, err := deriveHashKeys("a secret of the tier, 32 bytes..")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := deriveHashKeys("another tier's secret, 32 bytes.")
	a, b := newSyncAuth(keys.auth), newSyncAuth(other.auth)
	msg := []byte("PC\x01\x01 a placement")
	sealed := a.seal(append([]byte(nil), msg...))
	if body, ok := a.open(sealed); !ok || !bytes.Equal(body, msg) {
		t.Fatalf("open(seal(msg)) = %q, %v; want %q, true", body, ok, msg)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 1
		if _, ok := a.open(bad); ok {
			t.Errorf("open verified a message with byte %d changed", i)
		}
	}
	if _, ok := b.open(sealed); ok {
		t.Error("open verified a message sealed under another key")
	}
	if _, ok := a.open(sealed[:tagSize-1]); ok {
		t.Error("open verified a message shorter than a tag")
	}
}

// Sealing into a buffer with room allocates nothing: it runs on the
// request's goroutine for every published placement.
func TestSealAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; .ci/run runs this without it")
	}
	keys, err := deriveHashKeys("a secret of the tier, 32 bytes..")
	if err != nil {
		t.Fatal(err)
	}
	a := newSyncAuth(keys.auth)
	msg := []byte("PC\x01\x01 a placement")
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { a.seal(append(buf[:0], msg...)) }); n != 0 {
		t.Errorf("seal allocates %v times, want 0", n)
	}
}
