package workload

import (
	"encoding/json"
	"fmt"
)

// Session replays one conversation: it builds each turn's request body from
// the history so far and records the answers the engine gives. A Session is
// used by one goroutine.
type Session struct {
	conv    *Conversation
	model   string
	stream  bool
	history []Message
	next    int
}

// NewSession starts replaying c with the given model name. Its requests
// stream (with a usage chunk) if stream is set; a non-streaming session
// serves replays that need only the final usage and text.
func (c *Conversation) NewSession(model string, stream bool) *Session {
	h := make([]Message, len(c.Prefix), len(c.Prefix)+3*len(c.Turns))
	copy(h, c.Prefix)
	return &Session{conv: c, model: model, stream: stream, history: h}
}

// request is the JSON body of a chat completion request.
type request struct {
	Model         string            `json:"model"`
	Messages      []Message         `json:"messages"`
	Tools         []json.RawMessage `json:"tools,omitempty"`
	MaxTokens     int               `json:"max_tokens"`
	IgnoreEOS     bool              `json:"ignore_eos"`
	Stream        bool              `json:"stream"`
	StreamOptions *streamOptions    `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Done reports whether every turn has been sent.
func (s *Session) Done() bool { return s.next >= len(s.conv.Turns) }

// Turn returns the index of the next turn to send.
func (s *Session) Turn() int { return s.next }

// Next appends the next turn's messages to the history and returns that
// turn and its request body. Call Answer with the engine's answer before
// calling Next again.
func (s *Session) Next() (*Turn, []byte, error) {
	if s.Done() {
		return nil, nil, fmt.Errorf("conversation %s: no turn left", s.conv.ID)
	}
	t := &s.conv.Turns[s.next]
	s.history = append(s.history, t.messages()...)
	req := request{
		Model:     s.model,
		Messages:  s.history,
		Tools:     s.conv.Tools,
		MaxTokens: t.MaxTokens,
		IgnoreEOS: true,
		Stream:    s.stream,
	}
	if s.stream {
		req.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, fmt.Errorf("conversation %s turn %d: %w", s.conv.ID, s.next, err)
	}
	return t, body, nil
}

// Answer records the assistant's answer to the turn last returned by Next,
// with that turn's tool calls, and moves to the next turn.
func (s *Session) Answer(text string) {
	t := &s.conv.Turns[s.next]
	s.history = append(s.history, Message{Role: "assistant", Content: text, ToolCalls: t.ToolCalls})
	s.next++
}
