package peers

import (
	"strings"
	"testing"
)

func TestSGLangSelectKeepsPrefixTogether(t *testing.T) {
	s := new(SGLangSelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	pool := testPool(4)
	system := strings.Repeat("You answer questions about the ledger. ", 20)
	first := s.Select(pool, chatRequest(system, "first question"), nil)
	for _, q := range []string{"second", "third", "fourth"} {
		if got := s.Select(pool, chatRequest(system, q+" question"), nil); got != first {
			t.Errorf("Select(%s question) = %s, want %s, which holds the system prompt", q, got.Dial, first.Dial)
		}
	}
	// A miss goes to the least loaded: all idle, so the fewest requests
	// sent, which excludes the worker that took the four above.
	other := s.Select(pool, chatRequest(strings.Repeat("Another app entirely. ", 40), "hi"), nil)
	if other == first {
		t.Errorf("a cold request went to %s, which this policy sent 4 requests, want one it sent none", other.Dial)
	}
}
