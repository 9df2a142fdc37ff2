package examples_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestFailoverSettles runs Caddyfile.example as shipped in front of four
// engines, kills the engine holding the most conversations while nothing
// is in flight, and goes on with every conversation one request at a
// time. Each conversation the dead engine held moves once, to one new
// home, and its later turns stay there: a failover costs one cold
// prefill per conversation, not one per bounce. Answers of LLM length
// (longer than the history they follow, early in a conversation) leave
// the turn's cached history below min_match_ratio of its prompt.
func TestFailoverSettles(t *testing.T) {
	for _, answer := range []int{0, 300} {
		t.Run(fmt.Sprintf("answers of %d words", max(answer, 30)), func(t *testing.T) { failoverSettles(t, answer) })
	}
}

func failoverSettles(t *testing.T, answer int) {
	var engines []*engine
	var addrs []string
	for i := range 4 {
		e := startEngine(t, fmt.Sprintf("e%d", i))
		e.mu.Lock()
		e.answer = answer
		e.mu.Unlock()
		engines = append(engines, e)
		addrs = append(addrs, e.addr)
	}
	url, _, admin := runExample(t, readExample(t), addrs)
	client := newClient()

	var convs []*conversation
	for i := range 16 {
		convs = append(convs, newConversation(i))
	}
	for _, o := range takeTurns(t, client, url, admin, convs, 2) {
		if o.err != nil {
			t.Fatalf("before the kill: %s request %s: %v", o.conv, o.reqID, o.err)
		}
	}
	home := map[string]string{}
	count := map[string]int{}
	for conv, es := range homes(engines, 1) {
		if _, ok := oneHome(es); !ok {
			t.Errorf("before the kill, %s was served by %v, want one engine", conv, es)
		}
		h := es[len(es)-1]
		home[conv] = h
		count[h]++
	}
	victim := engines[0]
	for _, e := range engines {
		if count[e.name] > count[victim.name] {
			victim = e
		}
	}
	victim.kill()
	const after = 5
	errs := 0
	for range after {
		for _, c := range convs {
			for _, o := range c.turn(client, url) {
				if o.err != nil {
					errs++
				}
			}
			settled(t, admin)
		}
	}
	moved, stayed := 0, 0
	for conv, es := range homes(engines, 3) {
		if home[conv] != victim.name {
			if h, ok := oneHome(es); !ok || h != home[conv] {
				t.Errorf("%s moved from its live engine %s: %v", conv, home[conv], es)
			}
			continue
		}
		moved++
		if len(es) != after {
			t.Errorf("%s: %d of its %d turns after the kill were answered (%v)", conv, len(es), after, es)
			continue
		}
		if _, ok := oneHome(es); ok {
			stayed++
		} else {
			t.Errorf("%s, moved off %s, bounced between %v over its %d turns after the kill; want one new home", conv, victim.name, es, after)
		}
	}
	t.Logf("killed %s, home of %d conversations (homes %v); %d of %d settled on one new home; %d client errors", victim.name, moved, count, stayed, moved, errs)
	if moved == 0 {
		t.Fatal("no conversation moved: the test killed an idle engine")
	}
}

func newClient() *http.Client { return &http.Client{Timeout: 30 * time.Second} }
