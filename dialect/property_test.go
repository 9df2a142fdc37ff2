package dialect

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// Generators of random requests in each dialect, as an ordered value that
// style.encode serialises. A conversation is a list of turns; the request
// for the first k turns must render a byte prefix of the request for the
// first k+1.

type conversation struct {
	top   obj // top-level members besides the turns, in order
	field string
	turns []any
}

// request returns the request with the first k turns, the turns member
// placed at position pos among the other members.
func (c conversation) request(k, pos int) obj {
	o := make(obj, 0, len(c.top)+1)
	o = append(o, c.top[:pos]...)
	o = append(o, kv{c.field, arr(c.turns[:k])})
	return append(o, c.top[pos:]...)
}

func randChatPart(r *rand.Rand) any {
	switch r.IntN(6) {
	case 0:
		return obj{{"type", "image_url"}, {"image_url", obj{{"url", fmt.Sprintf("https://example.com/img/%d.png", r.IntN(1000))}, {"detail", "auto"}}}}
	case 1:
		return obj{{"type", "input_audio"}, {"input_audio", obj{{"data", sentence(r, 3)}, {"format", "wav"}}}}
	default:
		return obj{{"type", "text"}, {"text", sentence(r, 1+r.IntN(30))}}
	}
}

func randChatContent(r *rand.Rand) any {
	switch r.IntN(4) {
	case 0:
		n := 1 + r.IntN(4)
		parts := make(arr, n)
		for i := range parts {
			parts[i] = randChatPart(r)
		}
		return parts
	case 1:
		if r.IntN(3) == 0 {
			return nil
		}
	}
	return sentence(r, 1+r.IntN(60))
}

func randChatMessage(r *rand.Rand) any {
	switch r.IntN(6) {
	case 0:
		return obj{{"role", "assistant"}, {"content", nil}, {"tool_calls", arr{
			obj{{"id", fmt.Sprintf("call_%d", r.IntN(1e6))}, {"type", "function"}, {"function", obj{{"name", "get_weather"}, {"arguments", `{"city": "` + sentence(r, 2) + `"}`}}}},
		}}}
	case 1:
		return obj{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", sentence(r, 10)}}
	case 2:
		// Content before role: rendered from spans.
		return obj{{"content", randChatContent(r)}, {"role", "user"}, {"name", "alice"}}
	}
	role := [...]string{"user", "assistant", "system", "developer"}[r.IntN(4)]
	return obj{{"role", role}, {"content", randChatContent(r)}}
}

func randAnthropicBlock(r *rand.Rand) any {
	switch r.IntN(8) {
	case 0:
		return obj{{"type", "image"}, {"source", obj{{"type", "base64"}, {"media_type", "image/png"}, {"data", "iVBORw0KGgo/" + sentence(r, 2)}}}}
	case 1:
		return obj{{"type", "tool_use"}, {"id", "toolu_01"}, {"name", "search"}, {"input", obj{{"q", sentence(r, 3)}}}}
	case 2:
		return obj{{"type", "tool_result"}, {"tool_use_id", "toolu_01"}, {"content", sentence(r, 8)}}
	case 3:
		return obj{{"type", "tool_result"}, {"tool_use_id", "toolu_01"}, {"content", arr{obj{{"type", "text"}, {"text", sentence(r, 4)}}}}, {"is_error", false}}
	case 4:
		return obj{{"type", "thinking"}, {"thinking", sentence(r, 10)}, {"signature", "EqQBCg"}}
	case 5:
		return obj{{"text", sentence(r, 5)}, {"type", "text"}, {"cache_control", obj{{"type", "ephemeral"}}}}
	}
	return obj{{"type", "text"}, {"text", sentence(r, 1+r.IntN(30))}}
}

func randAnthropicMessage(r *rand.Rand) any {
	role := [...]string{"user", "assistant"}[r.IntN(2)]
	if r.IntN(3) == 0 {
		return obj{{"role", role}, {"content", sentence(r, 1+r.IntN(40))}}
	}
	n := 1 + r.IntN(3)
	blocks := make(arr, n)
	for i := range blocks {
		blocks[i] = randAnthropicBlock(r)
	}
	return obj{{"role", role}, {"content", blocks}}
}

func randResponsesItem(r *rand.Rand) any {
	switch r.IntN(7) {
	case 0:
		return obj{{"type", "function_call"}, {"call_id", "call_1"}, {"name", "lookup"}, {"arguments", `{"id":` + fmt.Sprint(r.IntN(100)) + `}`}}
	case 1:
		return obj{{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", sentence(r, 6)}}
	case 2:
		return obj{{"type", "reasoning"}, {"id", fmt.Sprintf("rs_%d", r.IntN(100))}, {"summary", arr{}}}
	case 3:
		return obj{{"type", "message"}, {"role", "assistant"}, {"content", arr{obj{{"type", "output_text"}, {"text", sentence(r, 12)}, {"annotations", arr{}}}}}}
	case 4:
		return obj{{"role", "user"}, {"content", arr{
			obj{{"type", "input_text"}, {"text", sentence(r, 8)}},
			obj{{"type", "input_image"}, {"image_url", "data:image/png;base64,iVBOR" + sentence(r, 1)}},
		}}}
	}
	role := [...]string{"user", "assistant", "developer"}[r.IntN(3)]
	return obj{{"role", role}, {"content", sentence(r, 1+r.IntN(40))}}
}

// genConversation returns a random conversation in the named dialect.
func genConversation(r *rand.Rand, dialect string, turns int) conversation {
	var c conversation
	gen := func(f func(*rand.Rand) any) {
		for range turns {
			c.turns = append(c.turns, f(r))
		}
	}
	switch dialect {
	case "openai_chat":
		c.top = obj{{"model", "gpt-4o"}, {"stream", true}, {"temperature", 0.3}}
		if r.IntN(2) == 0 {
			c.top = append(c.top, kv{"tools", rawJSON(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`)})
		}
		c.field = "messages"
		gen(randChatMessage)
	case "anthropic_messages":
		c.top = obj{{"model", "claude-sonnet-4-5"}, {"max_tokens", 1024}, {"system", arr{obj{{"type", "text"}, {"text", sentence(r, 10)}, {"cache_control", obj{{"type", "ephemeral"}}}}}}}
		if r.IntN(2) == 0 {
			c.top = append(c.top, kv{"tools", rawJSON(`[{"name":"search","description":"Search","input_schema":{"type":"object"}}]`)})
		}
		c.field = "messages"
		gen(randAnthropicMessage)
	case "openai_responses":
		c.top = obj{{"model", "gpt-4.1"}, {"instructions", sentence(r, 10)}, {"store", false}}
		c.field = "input"
		gen(randResponsesItem)
	case "openai_completions_ids", "sglang_generate_ids":
		c.top = obj{{"model", "m"}}
		c.field = "prompt"
		if dialect == "sglang_generate_ids" {
			c.top, c.field = obj{{"sampling_params", obj{{"temperature", 0}}}}, "input_ids"
		}
		for range turns {
			c.turns = append(c.turns, uint32(r.Uint32()))
		}
	case "openai_completions_batch":
		c.top = obj{{"model", "m"}}
		c.field = "prompt"
		for range turns {
			if r.IntN(2) == 0 {
				c.turns = append(c.turns, sentence(r, 5))
			} else {
				c.turns = append(c.turns, []uint32{r.Uint32(), r.Uint32()})
			}
		}
	default:
		panic("genConversation: unknown dialect " + dialect)
	}
	return c
}

// TestPrefixStability: for every dialect, the text of the first k turns is
// a byte prefix of the text of the first k+1, whatever the serialisation
// and the position of the turns among the other members.
func TestPrefixStability(t *testing.T) {
	dialects := []string{"openai_chat", "anthropic_messages", "openai_responses", "openai_completions_ids", "sglang_generate_ids", "openai_completions_batch"}
	r := rand.New(rand.NewPCG(42, 7))
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			for trial := range 40 {
				c := genConversation(r, d, 1+r.IntN(12))
				st := styles[trial%len(styles)]
				pos := r.IntN(len(c.top) + 1)
				var prev []byte
				for k := 0; k <= len(c.turns); k++ {
					body := st.encode(c.request(k, pos))
					got, _, err := Append(nil, body)
					if err != nil {
						t.Fatalf("Append(%s) error: %v", body, err)
					}
					if !bytes.HasPrefix(got, prev) {
						t.Fatalf("Append(%s) =\n  %q\ndoes not extend the text of %d turns\n  %q", body, got, k-1, prev)
					}
					prev = got
				}
			}
		})
	}
	// Prompt strings: a prompt that extends another renders a text that
	// extends it.
	for _, field := range []string{"prompt", "text"} {
		t.Run(field+" string", func(t *testing.T) {
			for trial := range 40 {
				st := styles[trial%len(styles)]
				s := sentence(r, 1+r.IntN(50))
				ext := s + sentence(r, 1+r.IntN(10))
				a, _, errA := Append(nil, st.encode(obj{{"model", "m"}, {field, s}}))
				b, _, errB := Append(nil, st.encode(obj{{field, ext}, {"stream", false}}))
				if errA != nil || errB != nil || !bytes.HasPrefix(b, a) {
					t.Fatalf("Append(%s: %q) = %q, %v; Append(%s: %q) = %q, %v; want the second to extend the first", field, s, a, errA, field, ext, b, errB)
				}
			}
		})
	}
}

// TestPlacement: conversations with the same system prompt but different
// first user messages have different placement keys; later turns of one
// conversation share the placement key of its first turn.
func TestPlacement(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	key := func(t *testing.T, body []byte) string {
		t.Helper()
		text, req, err := Append(nil, body)
		if err != nil {
			t.Fatalf("Append(%s) error: %v", body, err)
		}
		return string(text[:req.Placement])
	}
	for _, d := range []string{"openai_chat", "anthropic_messages", "openai_responses"} {
		t.Run(d, func(t *testing.T) {
			for trial := range 20 {
				st := styles[trial%len(styles)]
				c := genConversation(r, d, 10)
				// Turn i: the first user message, then alternating turns.
				c.turns[0] = obj{{"role", "user"}, {"content", "first question " + sentence(r, 5)}}
				other := c
				other.turns = append(arr{obj{{"role", "user"}, {"content", "another question " + sentence(r, 5)}}}, c.turns[1:]...)

				k1 := key(t, st.encode(c.request(1, 0)))
				k2 := key(t, st.encode(c.request(3, 0)))
				k5 := key(t, st.encode(c.request(9, 1)))
				if k1 != k2 || k1 != k5 {
					t.Errorf("placement keys of turns 1, 2, 5 differ:\n  %q\n  %q\n  %q", k1, k2, k5)
				}
				if ko := key(t, st.encode(other.request(3, 0))); ko == k1 {
					t.Errorf("conversations with different first user messages share placement key %q", ko)
				}
			}
		})
	}
	t.Run("system prompt only", func(t *testing.T) {
		a := key(t, []byte(`{"messages":[{"role":"system","content":"S"},{"role":"user","content":"one"}]}`))
		b := key(t, []byte(`{"messages":[{"role":"system","content":"S"},{"role":"user","content":"two"}]}`))
		if a == b {
			t.Errorf("placement keys of conversations sharing only a system prompt are equal: %q", a)
		}
	})
}

// TestVolatileFields: adding or changing fields that do not enter the
// prompt, and permuting the top-level members, changes neither the text
// nor the placement.
func TestVolatileFields(t *testing.T) {
	volatile := []kv{
		{"stream", true},
		{"temperature", 0.9},
		{"max_tokens", 4096},
		{"max_completion_tokens", 100},
		{"user", "user-1234"},
		{"metadata", obj{{"session", "abc"}, {"nested", arr{1, 2, obj{{"x", "y"}}}}}},
		{"stream_options", obj{{"include_usage", true}}},
		{"n", 3},
		{"seed", 7},
		{"top_p", 0.95},
		{"unknown_future_field", arr{"a", obj{{"b", nil}}}},
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, d := range []string{"openai_chat", "anthropic_messages", "openai_responses", "openai_completions_ids", "sglang_generate_ids", "openai_completions_batch"} {
		t.Run(d, func(t *testing.T) {
			c := genConversation(r, d, 8)
			base := c.request(len(c.turns), 0)
			want, wantReq, err := Append(nil, style{}.encode(base))
			if err != nil {
				t.Fatalf("Append(base) error: %v", err)
			}
			for trial := range 30 {
				o := append(obj{}, base...)
				for _, v := range volatile {
					if r.IntN(2) == 0 {
						o = append(o, v)
					}
				}
				r.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
				body := styles[trial%len(styles)].encode(o)
				got, req, err := Append(nil, body)
				if err != nil {
					t.Fatalf("Append(%s) error: %v", body, err)
				}
				if !bytes.Equal(got, want) || req.Placement != wantReq.Placement || req.Kind != wantReq.Kind {
					t.Fatalf("Append(%s) =\n  %q, Placement %d, %v\nwant\n  %q, Placement %d, %v", body, got, req.Placement, req.Kind, want, wantReq.Placement, wantReq.Kind)
				}
			}
		})
	}
}

// TestMemberOrderInObjects: the order of members inside messages and parts
// does not change the text (the fast path renders members as met, the slow
// path from spans).
func TestMemberOrderInObjects(t *testing.T) {
	pairs := []struct{ name, a, b string }{
		{"case 1", `{"messages":[{"role":"user","content":"hi"}]}`, `{"messages":[{"content":"hi","role":"user"}]}`},
		{"case 2", `{"messages":[{"role":"assistant","content":"x","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`,
			`{"messages":[{"tool_calls":[{"function":{"arguments":"{}","name":"f"}}],"content":"x","role":"assistant"}]}`},
		{"case 3", `{"messages":[{"role":"assistant","content":"x","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`,
			`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}],"content":"x"}]}`},
		{"case 4", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			`{"messages":[{"role":"user","content":[{"text":"a","type":"text"},{"text":"b","type":"text"}]}]}`},
		{"case 5", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"},{"type":"thinking","thinking":"z"}]}]}`,
			`{"messages":[{"role":"user","content":[{"content":"r","tool_use_id":"t","type":"tool_result"},{"thinking":"z","signature":"s","type":"thinking"}]}]}`},
		{"case 6", `{"input":[{"type":"message","role":"user","content":"q"},{"type":"function_call_output","output":"o"}]}`,
			`{"input":[{"content":"q","role":"user","type":"message"},{"output":"o","type":"function_call_output"}]}`},
		{"case 7", `{"input":[{"type":"function_call_output","output":"o"}]}`,
			`{"input":[{"output":"o","type":"function_call_output","role":"tool"}]}`},
		{"case 8", `{"input":[{"type":"reasoning","id":"rs","summary":[]}]}`,
			`{"input":[{"summary":[],"id":"rs","type":"reasoning"}]}`},
	}
	for _, tt := range pairs {
		t.Run(tt.name, func(t *testing.T) {
			a, ra, errA := Append(nil, []byte(tt.a))
			b, rb, errB := Append(nil, []byte(tt.b))
			if errA != nil || errB != nil || !bytes.Equal(a, b) || ra.Placement != rb.Placement {
				t.Errorf("Append(%s) = %q, %d, %v\nAppend(%s) = %q, %d, %v\nwant equal", tt.a, a, ra.Placement, errA, tt.b, b, rb.Placement, errB)
			}
		})
	}
}

// TestDuplicateMembers: the last of duplicate members counts, as in
// encoding/json, at every level.
func TestDuplicateMembers(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"top-level", `{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}`, msg("user") + "b"},
		{"content", `{"messages":[{"role":"user","content":"a","content":"b"}]}`, msg("user") + "b"},
		{"role", `{"messages":[{"role":"system","content":"a","role":"user"}]}`, msg("user") + "a"},
		{"text", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}`, msg("user") + "b"},
		{"type, still text", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","type":"input_text"}]}]}`, msg("user") + "a"},
		{"type, now other", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","type":"refusal"}]}]}`, msg("user") + "\x1drefusal\x1f" + le32(8) + membersDigest("text", `"a"`)},
		{"item type after content", `{"input":[{"role":"user","content":"a","type":"function_call_output","output":"o"}]}`, msg("tool") + "o"},
		{"prompt", `{"prompt":"a","prompt":"b"}`, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := Append(nil, []byte(tt.body))
			if err != nil || string(got) != tt.want {
				t.Errorf("Append(%s) = %q, %v, want %q", tt.body, got, err, tt.want)
			}
		})
	}
}
