package peers

import (
	"testing"

	"github.com/prefixcache/caddy-prefixcache/dialect"
)

func TestMessages(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string // role: text
	}{
		{"chat", `{"messages":[{"role":"system","content":"S"},{"role":"user","content":"U1"},{"role":"assistant","content":"A"}]}`,
			[]string{"system:S", "user:U1", "assistant:A"}},
		{"tools left out", `{"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"user:hi"}},
		{"image part left out", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:x"}},{"type":"text","text":"b"}]}]}`,
			[]string{"user:ab"}}, // "\n" only between adjacent text items
		{"tool call left out", `{"messages":[{"role":"assistant","content":"x","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"k\":\"\u001e\"}"}}]},{"role":"tool","content":"r"}]}`,
			[]string{"assistant:x", "tool:r"}},
		{"anthropic system", `{"system":"sys","messages":[{"role":"user","content":"q"}]}`,
			[]string{"system:sys", "user:q"}},
		{"completions batch: the first prompt", `{"prompt":["one","two"]}`, []string{":one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, req, err := dialect.Append(nil, []byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			msgs := messages(text, req.Kind)
			var got []string
			for _, m := range msgs {
				got = append(got, string(m.role)+":"+string(m.text))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("messages(%s) = %q, want %q", tt.body, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("messages(%s)[%d] = %q, want %q", tt.body, i, got[i], tt.want[i])
				}
			}
		})
	}
}
