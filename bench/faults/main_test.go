package main

import (
	"maps"
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
		{{0, "a", ""}, {0, "a", ""}, {1, "a", ""}, {1, "b", ""}}, // kept in 0, moved in 1
		{{0, "a", ""}}, // one turn: counts nowhere
		{{0, "b", ""}, {1, "b", ""}, {1, "b", ""}, {1, "b", ""}}, // one turn in 0; kept in 1
		{{2, "c", ""}, {2, "d", ""}, {2, "c", ""}},               // moved in 2
		{}, // lost at its first turn
	}
	conversations, kept := keptOneReplica(turns)
	wantConv := [maxPhases]int{1, 2, 1}
	wantKept := [maxPhases]int{1, 1, 0}
	if conversations != wantConv || kept != wantKept {
		t.Errorf("keptOneReplica(%v) = %v, %v, want %v, %v", turns, conversations, kept, wantConv, wantKept)
	}
}

// movesByReason counts a turn only when it went to another engine than
// its conversation's previous turn in the same phase, under the moved
// turn's reason.
func TestMovesByReason(t *testing.T) {
	turns := [][]servedTurn{
		{{0, "a", "cold"}, {0, "b", "prefill"}, {0, "a", "cold"}}, // two moves in 0
		{{0, "a", "match"}, {1, "b", "spill"}, {1, "b", "match"}}, // a new phase: no move
		{{2, "c", "cold"}, {2, "d", "spill"}, {2, "d", "match"}},  // one move in 2
		{},
	}
	moves := movesByReason(turns)
	want := [maxPhases]map[string]int{0: {"prefill": 1, "cold": 1}, 1: {}, 2: {"spill": 1}}
	for p := range maxPhases {
		if want[p] == nil {
			want[p] = map[string]int{}
		}
		if !maps.Equal(moves[p], want[p]) {
			t.Errorf("movesByReason(%v)[%d] = %v, want %v", turns, p, moves[p], want[p])
		}
	}
}
