//go:build linux

package prefixindex

import (
	"runtime"
	"syscall"
	"testing"
	"unsafe"
)

// cpuClock measures the CPU time of the benchmark's own thread, which the
// neighbours' load on a shared machine does not inflate as it does wall
// time (it still shares caches with them). The benchmarks report it as
// cpu-ns/op next to ns/op; compare alternatives on it.
type cpuClock struct{ start int64 }

// startCPU locks the calling goroutine to its thread and starts the clock.
func startCPU() cpuClock {
	runtime.LockOSThread()
	return cpuClock{start: threadCPU()}
}

// report stops the clock, unlocks the thread and reports cpu-ns/op.
func (c cpuClock) report(b *testing.B) {
	d := threadCPU() - c.start
	runtime.UnlockOSThread()
	if b.N > 0 {
		b.ReportMetric(float64(d)/float64(b.N), "cpu-ns/op")
	}
}

// threadCPU returns CLOCK_THREAD_CPUTIME_ID in nanoseconds.
func threadCPU() int64 {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}
