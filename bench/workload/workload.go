package workload

import (
	"encoding/json"
	"time"
)

// Message is one OpenAI chat completion message.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call made by the assistant.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and holds its JSON arguments as a string,
// as the OpenAI API does.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Turn is one request of a conversation.
type Turn struct {
	// Messages appended to the history before this turn's request: a user
	// message, or the results of the previous turn's tool calls.
	Messages []Message

	// Think is the pause between the end of the previous turn's answer and
	// this request (user think time, tool execution). The first turn is
	// sent at the conversation's Start instead.
	Think time.Duration

	// MaxTokens is the output length of this turn, in tokens.
	MaxTokens int

	// ToolCalls are appended to the assistant message that holds this
	// turn's answer, as if the model had emitted them after its text.
	ToolCalls []ToolCall

	// Lazy, if set, returns Messages when the turn is sent, so that a long
	// trace does not hold every prompt's text in memory at once.
	Lazy func() []Message

	// LazyBytes is the size of the text Lazy returns, for sizing caches.
	LazyBytes int
}

// messages returns the turn's new messages.
func (t *Turn) messages() []Message {
	if t.Messages == nil && t.Lazy != nil {
		return t.Lazy()
	}
	return t.Messages
}

// Conversation is a sequence of dependent requests from one client.
type Conversation struct {
	// ID identifies the conversation (or the shared-prefix group) and is
	// sent as the session header, for session-affinity policies.
	ID string

	// Start is the arrival time of the first turn at the workload's
	// natural rate, from the start of the workload.
	Start time.Duration

	// Prefix holds the messages before the first turn (the system prompt).
	Prefix []Message

	// Tools are the tool definitions sent with every turn, as JSON.
	Tools []json.RawMessage

	// Turns are the requests, in order.
	Turns []Turn
}

// Workload is a named list of conversations, sorted by start time.
type Workload struct {
	// Name is a short label for reports, e.g. "shared-prefix".
	Name string

	// Description states the workload's parameters in one line.
	Description string

	// Model is the model name sent in every request.
	Model string

	// Conversations are sorted by Start.
	Conversations []*Conversation

	// Rate is the natural request rate in requests per second: the rate at
	// which the Start times were generated or recorded. To offer qps, the
	// driver scales Start (not think times) by Rate/qps.
	Rate float64
}

// Requests returns the number of requests in w: the turns of all its
// conversations.
func (w *Workload) Requests() int {
	n := 0
	for _, c := range w.Conversations {
		n += len(c.Turns)
	}
	return n
}

// TextBytes returns the bytes of message text the workload's requests
// add to their conversations, answers included at BytesPerToken bytes per
// output token: an upper bound of the distinct text a cache must hold to
// never evict.
func (w *Workload) TextBytes() int {
	n := 0
	for _, c := range w.Conversations {
		for _, m := range c.Prefix {
			n += len(m.Content)
		}
		for _, t := range c.Tools {
			n += len(t)
		}
		for _, t := range c.Turns {
			n += t.LazyBytes + t.MaxTokens*BytesPerToken
			for _, m := range t.Messages {
				n += len(m.Content)
				for _, tc := range m.ToolCalls {
					n += len(tc.Function.Name) + len(tc.Function.Arguments)
				}
			}
			for _, tc := range t.ToolCalls {
				n += len(tc.Function.Name) + len(tc.Function.Arguments) + 64
			}
		}
	}
	return n
}

// poissonStarts sets the Start of convs to a Poisson process of rate
// convRate conversations per second drawn from r.
func poissonStarts(convs []*Conversation, convRate float64, r *rng) {
	var t float64
	for _, c := range convs {
		t += r.exp(1 / convRate)
		c.Start = time.Duration(t * float64(time.Second))
	}
}
