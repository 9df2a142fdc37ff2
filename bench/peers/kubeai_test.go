package peers

import "testing"

func TestKubeAISelectSharesRingOnFirstUserMessage(t *testing.T) {
	s := new(KubeAISelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	pool := testPool(4)
	// Same first user message, different system prompts: KubeAI hashes
	// only the former.
	a := s.Select(pool, chatRequest("system A", "What is the capital of France?"), nil)
	b := s.Select(pool, chatRequest("system B", "What is the capital of France?"), nil)
	if a != b {
		t.Errorf("same first user message went to %s and %s, want one endpoint", a.Dial, b.Dial)
	}
}
