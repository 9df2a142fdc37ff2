package peers

import (
	"strings"
	"testing"
	"time"
)

func TestVLLMStackSelect(t *testing.T) {
	s := new(VLLMStackSelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	pool := testPool(3)
	systems := []string{
		strings.Repeat("Alpha app instructions. ", 10),
		strings.Repeat("Bravo app instructions. ", 10),
		strings.Repeat("Charlie app instructions. ", 10),
	}
	// Nothing matches: each goes to the first never-used endpoint.
	for i, sys := range systems {
		if got := s.Select(pool, chatRequest(sys, "hello"), nil); got != pool[i] {
			t.Fatalf("request %d went to %s, want the never-used %s", i, got.Dial, pool[i].Dial)
		}
	}
	// A continuation goes to the holder of its prefix.
	if got := s.Select(pool, chatRequest(systems[1], "hello again"), nil); got != pool[1] {
		t.Errorf("a Bravo continuation went to %s, want %s", got.Dial, pool[1].Dial)
	}
	// No match: the lowest rate (pool[0] and pool[2] tie at one request).
	if got := s.Select(pool, chatRequest(strings.Repeat("Delta. ", 40), "hello"), nil); got != pool[0] {
		t.Errorf("an unmatched request went to %s, want %s, first of the least busy", got.Dial, pool[0].Dial)
	}
}
