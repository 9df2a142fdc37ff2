//go:build !race

package caddymodule

// raceEnabled is true under the race detector, which makes sync.Pool drop a
// quarter of its items on purpose and instruments allocations of its own, so
// allocation counts mean nothing there.
const raceEnabled = false
