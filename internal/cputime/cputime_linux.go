//go:build linux

// Package cputime measures the CPU time of a benchmark's own thread, which
// the neighbours' load on a shared machine does not inflate as it does wall
// time (it still shares caches with them). Benchmarks report it as
// cpu-ns/op next to ns/op; compare alternatives on it.
package cputime

import (
	"runtime"
	"syscall"
	"testing"
	"unsafe"
)

// Clock is a running thread CPU clock.
type Clock struct{ start int64 }

// Start locks the calling goroutine to its thread and starts the clock.
func Start() Clock {
	runtime.LockOSThread()
	return Clock{start: Thread()}
}

// Report stops the clock, unlocks the thread and reports cpu-ns/op.
func (c Clock) Report(b *testing.B) {
	d := Thread() - c.start
	runtime.UnlockOSThread()
	if b.N > 0 {
		b.ReportMetric(float64(d)/float64(b.N), "cpu-ns/op")
	}
}

// Thread returns CLOCK_THREAD_CPUTIME_ID in nanoseconds.
func Thread() int64 {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}
