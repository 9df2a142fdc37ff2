//go:build !linux

package caddymodule

import "testing"

// cpuClock reports nothing where the thread CPU clock is not wired up.
type cpuClock struct{}

func startCPU() cpuClock { return cpuClock{} }

func (cpuClock) report(*testing.B) {}

func threadCPU() int64 { return 0 }
