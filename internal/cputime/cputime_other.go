//go:build !linux

// Package cputime measures the CPU time of a benchmark's own thread; where
// the thread CPU clock is not wired up it reports nothing.
package cputime

import "testing"

// Clock reports nothing on this platform.
type Clock struct{}

// Start returns a clock that reports nothing.
func Start() Clock { return Clock{} }

// Report does nothing on this platform.
func (Clock) Report(*testing.B) {}

// Thread returns 0 on this platform.
func Thread() int64 { return 0 }
