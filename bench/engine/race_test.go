//go:build race

package engine

// raceEnabled: the race detector slows the engine's real work (JSON,
// tokenization) by an order of magnitude.
const raceEnabled = true
