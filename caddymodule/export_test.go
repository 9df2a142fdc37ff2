package caddymodule

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

// BodyHeld returns the bytes the body buffers of the process hold, for
// the external tests.
func BodyHeld() int64 { return bodyHeld.Load() }

// TestMain runs the tests, then checks that no body buffer stayed charged
// to the process's body budget: every request's buffer must go back, in
// the tests as in Caddy (a request's context always ends).
func TestMain(m *testing.M) {
	code := m.Run()
	deadline := time.Now().Add(10 * time.Second)
	for bodyHeld.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the last requests' contexts end on goroutines of their own
	}
	// (Benchmarks reuse one request and leave its last buffer charged.)
	benchmarks := flag.Lookup("test.bench").Value.String() != ""
	if held := bodyHeld.Load(); held != 0 && code == 0 && !benchmarks {
		fmt.Fprintf(os.Stderr, "body buffers of %d bytes are still charged to the budget after the tests: a buffer leaked\n", held)
		code = 1
	}
	os.Exit(code)
}
