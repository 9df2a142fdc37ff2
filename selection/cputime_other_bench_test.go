//go:build !linux

package selection

import "testing"

// cpuClock reports nothing where the thread CPU clock is not wired up.
type cpuClock struct{}

func startCPU() cpuClock { return cpuClock{} }

func (cpuClock) report(*testing.B) {}
