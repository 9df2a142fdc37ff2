package engine

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRenderChat(t *testing.T) {
	body := `{
		"tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}],
		"messages": [
			{"role": "developer", "content": "Be brief."},
			{"role": "user", "content": [{"type": "text", "text": "Look"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]},
			{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{\"k\": 1}"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": "42"}
		]}`
	var req chatRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	turns, err := chatTurns(req.Messages)
	if err != nil {
		t.Fatal(err)
	}
	got, err := renderTurns(turns, req.Tools)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.\n\n# Tools\n\n<tools>\n" +
		`{"type":"function","function":{"name":"get","parameters":{"type":"object"}}}` + "\n</tools><|im_end|>\n" +
		"<|im_start|>user\nLook\n" + digest([]byte(`{"url": "http://x/y.png"}`)) + "<|im_end|>\n" +
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"k\":1}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got != want {
		t.Errorf("renderTurns() =\n%s\nwant\n%s", got, want)
	}
}

// TestRenderPrefixStable checks that each turn's rendering, without the
// generation prompt, is a prefix of the next turn's, in both dialects.
func TestRenderPrefixStable(t *testing.T) {
	gen := tokIMStart + "assistant\n"
	chat := []chatMessage{
		{Role: "system", Content: json.RawMessage(`"sys"`)},
		{Role: "user", Content: json.RawMessage(`"q1"`)},
		{Role: "assistant", Content: json.RawMessage(`"a1"`)},
		{Role: "user", Content: json.RawMessage(`"q2"`)},
	}
	anthropic := []anthropicMessage{
		{Role: "user", Content: json.RawMessage(`"q1"`)},
		{Role: "assistant", Content: json.RawMessage(`[{"type":"text","text":"a1"},{"type":"tool_use","name":"f","input":{}}]`)},
		{Role: "user", Content: json.RawMessage(`[{"type":"tool_result","content":"r"},{"type":"text","text":"q2"}]`)},
	}
	var prev string
	for k := 1; k <= len(chat); k++ {
		cur := must(renderTurns(must(chatTurns(chat[:k])), nil))
		if !strings.HasPrefix(cur, strings.TrimSuffix(prev, gen)) {
			t.Errorf("chat: %d messages render as %q, not an extension of %q", k, cur, prev)
		}
		prev = cur
	}
	prev = ""
	for k := 1; k <= len(anthropic); k++ {
		cur := must(renderTurns(must(anthropicTurns(json.RawMessage(`"sys"`), anthropic[:k])), nil))
		if !strings.HasPrefix(cur, strings.TrimSuffix(prev, gen)) {
			t.Errorf("anthropic: %d messages render as %q, not an extension of %q", k, cur, prev)
		}
		prev = cur
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
