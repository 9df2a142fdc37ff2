package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The chat template is ChatML (Qwen2.5 and others):
//
//	<|im_start|>system\n{system}\n\n# Tools\n\n<tools>\n{tool}\n</tools><|im_end|>\n
//	<|im_start|>user\n{text}<|im_end|>\n
//	<|im_start|>assistant\n{text}\n<tool_call>\n{call}\n</tool_call><|im_end|>\n
//	<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n
//	<|im_start|>assistant\n
//
// Like a real template it is prefix-stable: the rendering of the first k
// messages, without the final generation prompt, is a prefix of the
// rendering of k+1 messages. An answer the engine generated, sent back as an
// assistant message, renders as exactly the text the engine produced after
// the generation prompt, so the follow-up turn's tokens extend the tokens
// the engine cached while generating.

// turn is one rendered message, independent of the API dialect.
type turn struct {
	role string // system, user, assistant, tool
	text string
}

// renderTurns renders turns, tools (as JSON values) and the generation
// prompt. A leading system turn absorbs the tools section.
func renderTurns(turns []turn, tools []json.RawMessage) (string, error) {
	var b strings.Builder
	if len(tools) > 0 {
		b.WriteString(tokIMStart + "system\n")
		if len(turns) > 0 && turns[0].role == "system" {
			b.WriteString(turns[0].text)
			b.WriteString("\n\n")
			turns = turns[1:]
		}
		b.WriteString("# Tools\n\n<tools>\n")
		for _, t := range tools {
			if err := writeCompactJSON(&b, t); err != nil {
				return "", fmt.Errorf("rendering tools: %w", err)
			}
			b.WriteByte('\n')
		}
		b.WriteString("</tools>" + tokIMEnd + "\n")
	}
	for _, t := range turns {
		if t.role == "tool" {
			b.WriteString(tokIMStart + "user\n<tool_response>\n")
			b.WriteString(t.text)
			b.WriteString("\n</tool_response>" + tokIMEnd + "\n")
			continue
		}
		b.WriteString(tokIMStart)
		b.WriteString(t.role)
		b.WriteByte('\n')
		b.WriteString(t.text)
		b.WriteString(tokIMEnd + "\n")
	}
	b.WriteString(tokIMStart + "assistant\n")
	return b.String(), nil
}

// writeCompactJSON writes the JSON value raw without insignificant space,
// as a template's tojson filter re-serializes it.
func writeCompactJSON(b *strings.Builder, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return err
	}
	b.Write(buf.Bytes())
	return nil
}

// toolCallText renders one tool call as the model would have emitted it.
func toolCallText(b *strings.Builder, name string, arguments json.RawMessage) error {
	b.WriteString("<tool_call>\n{\"name\": ")
	n, _ := json.Marshal(name)
	b.Write(n)
	b.WriteString(", \"arguments\": ")
	if len(bytes.TrimSpace(arguments)) == 0 {
		b.WriteString("{}")
	} else if err := writeCompactJSON(b, arguments); err != nil {
		return fmt.Errorf("tool call %q arguments: %w", name, err)
	}
	b.WriteString("}\n</tool_call>")
	return nil
}

// digest names binary or remote content (an image) by a hash of its JSON.
func digest(raw []byte) string {
	return fmt.Sprintf("<image %016x>", saltSeed(string(raw)))
}

// OpenAI chat completions.

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"` // a JSON document in a string
	} `json:"function"`
}

type chatPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url"`
}

// chatTurns converts OpenAI chat messages to turns.
func chatTurns(msgs []chatMessage) ([]turn, error) {
	if len(msgs) == 0 {
		return nil, errors.New("messages must not be empty")
	}
	turns := make([]turn, 0, len(msgs))
	for i, m := range msgs {
		text, err := chatContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		role := m.Role
		switch role {
		case "":
			return nil, fmt.Errorf("messages[%d].role must not be empty", i)
		case "developer":
			role = "system"
		}
		if len(m.ToolCalls) > 0 {
			var b strings.Builder
			b.WriteString(text)
			for _, c := range m.ToolCalls {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				if err := toolCallText(&b, c.Function.Name, json.RawMessage(c.Function.Arguments)); err != nil {
					return nil, fmt.Errorf("messages[%d]: %w", i, err)
				}
			}
			text = b.String()
		}
		turns = append(turns, turn{role: role, text: text})
	}
	return turns, nil
}

// chatContent returns the text of a message's content: a string, null, or
// an array of parts (text parts joined by newlines, images as a digest).
func chatContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var parts []chatPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", err
		}
		texts := make([]string, 0, len(parts))
		for _, p := range parts {
			switch {
			case p.Type == "text":
				texts = append(texts, p.Text)
			case len(p.ImageURL) > 0:
				texts = append(texts, digest(p.ImageURL))
			}
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", errors.New("must be a string, an array of parts or null")
}

// Anthropic messages.

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Name    string          `json:"name"`    // tool_use
	Input   json.RawMessage `json:"input"`   // tool_use
	Content json.RawMessage `json:"content"` // tool_result: string or blocks
	Source  json.RawMessage `json:"source"`  // image, document
}

// anthropicTurns converts an Anthropic system prompt and messages to turns.
// Tool results become tool turns of their own, after the message's text.
func anthropicTurns(system json.RawMessage, msgs []anthropicMessage) ([]turn, error) {
	if len(msgs) == 0 {
		return nil, errors.New("messages must not be empty")
	}
	var turns []turn
	if sys, err := anthropicContent(system, nil); err != nil {
		return nil, fmt.Errorf("system: %w", err)
	} else if sys != "" {
		turns = append(turns, turn{role: "system", text: sys})
	}
	for i, m := range msgs {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d].role must not be empty", i)
		}
		var results []string
		text, err := anthropicContent(m.Content, &results)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		for _, r := range results {
			turns = append(turns, turn{role: "tool", text: r})
		}
		if text != "" || len(results) == 0 {
			turns = append(turns, turn{role: m.Role, text: text})
		}
	}
	return turns, nil
}

// anthropicContent returns the text of a string or an array of content
// blocks. Tool results are appended to results if it is not nil, else
// rendered inline.
func anthropicContent(raw json.RawMessage, results *[]string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var blocks []anthropicBlock
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return "", err
		}
		var b strings.Builder
		for _, blk := range blocks {
			var piece string
			switch blk.Type {
			case "text":
				piece = blk.Text
			case "tool_use":
				var tb strings.Builder
				if err := toolCallText(&tb, blk.Name, blk.Input); err != nil {
					return "", err
				}
				piece = tb.String()
			case "tool_result":
				s, err := anthropicContent(blk.Content, nil)
				if err != nil {
					return "", fmt.Errorf("tool_result: %w", err)
				}
				if results != nil {
					*results = append(*results, s)
					continue
				}
				piece = s
			case "image", "document":
				piece = digest(blk.Source)
			default:
				continue // thinking and others do not reach the prompt
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(piece)
		}
		return b.String(), nil
	}
	return "", errors.New("must be a string or an array of content blocks")
}
