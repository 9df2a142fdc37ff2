package peers

import (
	"strings"
	"testing"
)

func TestLLMDSelectFollowsPrefix(t *testing.T) {
	s := new(LLMDSelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	pool := testPool(3)
	system := strings.Repeat("Shared instructions for the support bot. ", 30)
	first := s.Select(pool, chatRequest(system, "question one"), nil)
	for _, q := range []string{"question two", "question three"} {
		if got := s.Select(pool, chatRequest(system, q), nil); got != first {
			t.Errorf("Select(%s) = %s, want %s, which holds the system prompt's blocks", q, got.Dial, first.Dial)
		}
	}
}
