//go:build !race

package prefixindex

// raceEnabled is true under the race detector, which makes sync.Pool drop a
// quarter of its items on purpose, so allocation counts mean nothing there.
const raceEnabled = false
