package peers

import (
	"strings"
	"testing"
	"time"
)

// TestVLLMStackUpstreamRouting replays production-stack's
// src/tests/test_prefixaware_router.py (vllm-project/production-stack at
// a6c01db05f65f556235413ba8dbcfb0c01132fff): with prefix_min_match_length
// 128, a cold prompt falls back to the lowest QPS (engine1 at 5 against
// 10) and seeds the trie; its follow-up shares the first 128-character
// chunk, matches at the threshold and pins to engine1 although engine2
// now has the lower QPS (test_below_threshold_seeding_enables_later_pinning).
// With the default threshold 0 nothing falls back: a cold prompt goes to
// a random endpoint among all, a warm one to a random holder.
func TestVLLMStackUpstreamRouting(t *testing.T) {
	const engine1, engine2 = 0, 1
	t0 := time.Unix(1000, 0)
	qps := func(q1, q2 int) *rateWindow { // requests per 60s window
		w := newRateWindow(time.Minute)
		for range q1 {
			w.add(engine1, t0)
		}
		for range q2 {
			w.add(engine2, t0)
		}
		return w
	}
	first := strings.Repeat("x", 128) + strings.Repeat("y", 72)
	followup := first + strings.Repeat("z", 40)
	trie := newHashTrie(VLLMStackChunkSize)
	never := func(int) int { t.Fatal("random choice below the threshold"); return 0 }

	got, reason := vllmStackRoute(trie, qps(5, 10), []byte(first), []int{engine1, engine2}, 128, t0, never)
	if got != engine1 || reason != "qps" {
		t.Fatalf("cold prompt = engine %d (%s), want engine1 by QPS", got, reason)
	}
	trie.insert([]byte(first), got)
	last := func(n int) int { return n - 1 }
	if got, reason := vllmStackRoute(trie, qps(10, 5), []byte(followup), []int{engine1, engine2}, 128, t0, last); got != engine1 || reason != "prefix" {
		t.Errorf("follow-up = engine %d (%s), want engine1 pinned by its prefix", got, reason)
	}

	tests := []struct {
		name       string
		prompt     string
		pick       func(int) int
		want       int
		wantReason string
	}{
		{"cold: random among all, first", strings.Repeat("q", 300), func(int) int { return 0 }, engine1, "random"},
		{"cold: random among all, last", strings.Repeat("q", 300), last, engine2, "random"},
		{"warm: the holder only", followup, last, engine1, "prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := vllmStackRoute(trie, qps(0, 50), []byte(tt.prompt), []int{engine1, engine2}, 0, t0, tt.pick)
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("vllmStackRoute(%.10q…) = %d, %s, want %d, %s", tt.prompt, got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

// TestVLLMStackSelectPrompt checks that Select hashes the prompt upstream
// builds, the messages' contents joined with "\n" without roles: two
// requests with the same contents under other roles share a prefix.
func TestVLLMStackSelectPrompt(t *testing.T) {
	s := new(VLLMStackSelection)
	if err := s.Provision(newTestContext(t)); err != nil {
		t.Fatal(err)
	}
	s.intn = func(n int) int { return n - 1 }
	pool := testPool(3)
	system := strings.Repeat("Alpha app instructions. ", 10)
	first := s.Select(pool, chatRequest(system, "hello"), nil)
	if first != pool[2] {
		t.Fatalf("cold request went to %s, want the random pick %s", first.Dial, pool[2].Dial)
	}
	s.intn = func(int) int { return 0 }
	if got := s.Select(pool, chatRequest(system, "hello again"), nil); got != first {
		t.Errorf("continuation went to %s, want the holder %s", got.Dial, first.Dial)
	}
	req := routingText(chatRequest("sys", "usr"))
	if got := string(joinMessages(messages(req.text, req.kind), "\n", false)); got != "sys\nusr" {
		t.Errorf("prompt = %q, want %q", got, "sys\nusr")
	}
}
