package caddymodule

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// BodyHeld returns the bytes of body buffers and chunk hashes requests
// hold, for the external tests; BodyBuffersHeld the buffers alone.
func BodyHeld() int64 { return bodyInUse.Load() + bodyHashes.Load() }

func BodyBuffersHeld() int64 { return bodyInUse.Load() }

// GCHeadroom is the collector's headroom per live buffer byte that the
// body budget covers (budget.go).
func GCHeadroom() float64 { return gcHeadroom() }

// SettleBodies waits until the pools hold no idle buffer and every buffer
// dropped has been collected, so that a test's body budget starts from
// what requests hold: each collection empties the pools a step further,
// and the runtime's cleanups give the bytes back.
func SettleBodies() {
	for len(textBufs) > 0 {
		<-textBufs
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		if bodyAllocated.Load() == bodyInUse.Load() {
			return
		}
		time.Sleep(time.Millisecond) // the cleanups run on a goroutine of their own
	}
}

// TestMain runs the tests, then checks that no body buffer stayed charged
// to the process's body budget: every request's buffer must go back, in
// the tests as in Caddy (a request's context always ends).
func TestMain(m *testing.M) {
	code := m.Run()
	deadline := time.Now().Add(10 * time.Second)
	for bodyInUse.Load()+bodyHashes.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the last requests' contexts end on goroutines of their own
	}
	// (Benchmarks reuse one request and leave its last buffer charged.)
	benchmarks := flag.Lookup("test.bench").Value.String() != ""
	if held := bodyInUse.Load() + bodyHashes.Load(); held != 0 && code == 0 && !benchmarks {
		fmt.Fprintf(os.Stderr, "body buffers of %d bytes are still charged to the budget after the tests: a buffer leaked\n", held)
		code = 1
	}
	os.Exit(code)
}

// RaceEnabled says whether the tests run under the race detector.
const RaceEnabled = raceEnabled
