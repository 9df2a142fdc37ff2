package dialect

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// Bodies that spend the budget (see "Budget" in the package doc). The
// expected texts follow from its rule: a unit per member and element read,
// one per skipBytes bytes of a skipped value's work, one per redoBytes of
// an object rendered again; the text ends where the next unit is missing.

// tinyMessages returns a chat body of n messages {"role":"user","content":"a"},
// 3 units each (the element and two members), after a system prompt of
// blocks (its own budget).
func tinyMessages(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":"a"}`)
	}
	b.WriteString(`],"system":[{"type":"text","text":"S"}]}`)
	return []byte(b.String())
}

func TestBudget(t *testing.T) {
	whole := sectionBudget / 3 // messages read whole: the next one is cut at its first key
	msgs := func(n int) string { return msg("system") + "S" + strings.Repeat(msg("user")+"a", n) }
	deep := strings.Repeat("[", 8*skipBytes) + strings.Repeat("]", 8*skipBytes)
	tests := []struct {
		name string
		body []byte
		want string
	}{
		{"under the budget", tinyMessages(whole), msgs(whole)},
		{"cut in the last message", tinyMessages(whole + 1), msgs(whole)},
		{"cut long before the end", tinyMessages(3 * whole), msgs(whole)},
		// A skipped member of 256 brackets: 16 units more per message (its
		// work is 256 bytes, one per bracket), 20 in all. The message that
		// spends the budget has rendered its role and content before it.
		{"skipped values are charged", []byte(`{"messages":[` + strings.Repeat(`{"role":"user","content":"a","x":`+deep+`},`, sectionBudget/20+1) + `{"role":"user","content":"b"}]}`),
			strings.Repeat(msg("user")+"a", sectionBudget/20+1)},
		// A duplicate role: the message of 51 bytes is rendered again for
		// 1 + 51/16 = 4 units, 4 + 4 in all.
		{"objects rendered again are charged", []byte(`{"messages":[` + strings.Repeat(`{"role":"user","content":"aaaaaa","role":"user"},`, sectionBudget/8+1) + `{"role":"user","content":"b"}]}`),
			strings.Repeat(msg("user")+"aaaaaa", sectionBudget/8)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := Append(nil, tt.body)
			if err != nil || string(got) != tt.want {
				t.Errorf("Append(%d bytes) = %d bytes, %v, want %d bytes (first difference at %d)", len(tt.body), len(got), err, len(tt.want), firstDiff(got, []byte(tt.want)))
			}
			checkLimit(t, tt.body, len(tt.want)/2)
			checkLimit(t, tt.body, len(tt.want)+1)
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestBudgetTopLevel: at most topMembers top-level members, else the body
// is not a request.
func TestBudgetTopLevel(t *testing.T) {
	body := func(n int) []byte {
		return []byte(`{"prompt":"x"` + strings.Repeat(`,"k":0`, n-1) + `}`)
	}
	if got, _, err := Append(nil, body(topMembers)); err != nil || string(got) != "x" {
		t.Errorf("Append(%d top-level members) = %q, %v, want \"x\", nil", topMembers, got, err)
	}
	if _, _, err := Append(nil, body(topMembers+1)); !errors.Is(err, ErrUnknownDialect) {
		t.Errorf("Append(%d top-level members) error = %v, want ErrUnknownDialect", topMembers+1, err)
	}
}

// TestBudgetGroups: the sections before the turns (tools, system,
// instructions) have a budget of their own, so turns that spend theirs
// change nothing before them, whatever the member order.
func TestBudgetGroups(t *testing.T) {
	blocks := `[` + strings.Repeat(`{"type":"text","text":"s"},`, 100) + `{"type":"text","text":"t"}]`
	turns := `[` + strings.Repeat(`{"role":"user","content":[{"type":"text","text":"u"}]},`, sectionBudget) + `{"role":"user","content":"v"}]`
	want, _, err := Append(nil, []byte(`{"system":`+blocks+`,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"messages":` + turns + `,"system":` + blocks + `}`, `{"system":` + blocks + `,"messages":` + turns + `}`} {
		got, _, err := Append(nil, []byte(body))
		if err != nil || !bytes.HasPrefix(got, want) || len(got) <= len(want) {
			t.Errorf("Append(system and %d messages) = %d bytes, %v, want the system text (%d bytes) and cut turns", sectionBudget+1, len(got), err, len(want))
		}
	}
}

// TestBudgetPrefixStability: conversations whose turns spend the budget
// stay prefix-stable across the turn that spends it, in every dialect
// with turns, whatever the serialisation and member order.
func TestBudgetPrefixStability(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 5))
	dialects := []string{"openai_chat", "anthropic_messages", "openai_responses", "openai_completions_batch"}
	if raceEnabled {
		dialects = dialects[:1]
	}
	for i, d := range dialects {
		t.Run(d, func(t *testing.T) {
			c := genConversation(r, d, 0)
			e := encoded{st: styles[i%len(styles)], c: c, pos: r.IntN(len(c.top) + 1)}
			// Turns of random shapes until they spend the budget.
			for !spent(e.request(len(e.turns))) {
				for _, turn := range genConversation(r, d, 1000).turns {
					e.turns = append(e.turns, e.st.encode(turn))
				}
			}
			full, _, err := Append(nil, e.request(len(e.turns)))
			if err != nil {
				t.Fatal(err)
			}
			// The turn that spends the budget: the least k whose text is
			// the full one (past it, more turns render the same).
			k := sort.Search(len(e.turns), func(k int) bool {
				text, _, _ := Append(nil, e.request(k))
				return bytes.Equal(text, full)
			})
			var prev []byte
			for j := max(0, k-4); j <= min(len(e.turns), k+4); j++ {
				text, _, err := Append(nil, e.request(j))
				if err != nil {
					t.Fatal(err)
				}
				if prev != nil && !bytes.HasPrefix(text, prev) {
					t.Fatalf("%d turns render %d bytes, not extending the %d bytes of %d turns (budget spent at turn %d)", j, len(text), len(prev), j-1, k)
				}
				prev = text
			}
		})
	}
}

// encoded is a conversation with its turns serialised once, for requests
// of many turns.
type encoded struct {
	st    style
	c     conversation
	pos   int
	turns [][]byte
}

// request is c.request(k, pos) serialised with st.
func (e encoded) request(k int) []byte {
	b := []byte{'{'}
	member := func(i int, key string, value []byte) {
		if i > 0 {
			b = e.st.comma(b)
		}
		b = append(e.st.appendString(b, key), ':')
		if e.st.spaces {
			b = append(b, ' ')
		}
		b = append(b, value...)
	}
	for i, m := range e.c.top[:e.pos] {
		member(i, m.k, e.st.encode(m.v))
	}
	turns := []byte{'['}
	for i, t := range e.turns[:k] {
		if i > 0 {
			turns = e.st.comma(turns)
		}
		turns = append(turns, t...)
	}
	member(e.pos, e.c.field, append(turns, ']'))
	for i, m := range e.c.top[e.pos:] {
		member(e.pos+1+i, m.k, e.st.encode(m.v))
	}
	return append(b, '}')
}

// spent reports whether the turns of body spend their budget.
func spent(body []byte) bool {
	p := parser{b: body, limit: maxInt}
	p.top(nil)
	return p.budget[groupTurns] == 0
}

// TestBudgetNoAllocs: a body cut by the budget renders without allocating.
func TestBudgetNoAllocs(t *testing.T) {
	body := tinyMessages(sectionBudget)
	buf := make([]byte, 0, len(body))
	allocs := testing.AllocsPerRun(5, func() {
		if _, _, err := Append(buf, body); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Append(buf, %s) allocates %v times per call, want 0", fmt.Sprintf("%d tiny messages", sectionBudget), allocs)
	}
}
