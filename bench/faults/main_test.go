package main

import (
	"os"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/bench/driver"
)

func TestMain(m *testing.M) {
	// The redis fault runs two edges: this binary, re-executed.
	driver.ServeEdgeIfChild()
	os.Exit(m.Run())
}

// keptOneReplica counts a phase's conversation only with two turns or
// more in it, and as kept only when they all went to one engine.
func TestKeptOneReplica(t *testing.T) {
	turns := [][]servedTurn{
		{{0, "a"}, {0, "a"}, {1, "a"}, {1, "b"}}, // kept in 0, moved in 1
		{{0, "a"}},                               // one turn: counts nowhere
		{{0, "b"}, {1, "b"}, {1, "b"}, {1, "b"}}, // one turn in 0; kept in 1
		{{2, "c"}, {2, "d"}, {2, "c"}},           // moved in 2
		{},                                       // lost at its first turn
	}
	conversations, kept := keptOneReplica(turns)
	wantConv := [maxPhases]int{1, 2, 1}
	wantKept := [maxPhases]int{1, 1, 0}
	if conversations != wantConv || kept != wantKept {
		t.Errorf("keptOneReplica(%v) = %v, %v, want %v, %v", turns, conversations, kept, wantConv, wantKept)
	}
}
