//go:build !race

package dialect

// raceEnabled is set when the race detector is: the slowest property
// tests, which start no goroutines, then check fewer cases.
const raceEnabled = false
