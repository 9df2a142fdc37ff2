package workload

import (
	"encoding/json"
	"fmt"
	"time"
)

// Agent configures agentic tool loops: Runs independent agent runs of one
// agent framework, which share a system prompt of SystemTokens tokens and a
// tools array of Tools function definitions of ToolTokens tokens of
// description each. A run starts with a task of TaskTokens tokens; each
// step the assistant answers with OutputTokens tokens of text and a tool
// call, the tool takes an exponentially distributed time of mean
// ToolLatency, and its result of MinResultTokens to MaxResultTokens tokens
// is the next request's new message. The last of MinSteps to MaxSteps steps
// ends without a tool call.
type Agent struct {
	Runs            int
	Tools           int
	ToolTokens      int
	SystemTokens    int
	TaskTokens      int
	OutputTokens    int
	MinResultTokens int
	MaxResultTokens int
	MinSteps        int
	MaxSteps        int
	ToolLatency     time.Duration
	Seed            uint64
}

// DefaultAgent returns an agent workload of n runs: 12 tools of 100 tokens,
// a 1,500-token system prompt, 200-token tasks, 3 to 10 steps of 100 output
// tokens and 200- to 2,000-token tool results, 1 s mean tool latency.
func DefaultAgent(n int, seed uint64) Agent {
	return Agent{
		Runs:            n,
		Tools:           12,
		ToolTokens:      100,
		SystemTokens:    1500,
		TaskTokens:      200,
		OutputTokens:    100,
		MinResultTokens: 200,
		MaxResultTokens: 2000,
		MinSteps:        3,
		MaxSteps:        10,
		ToolLatency:     time.Second,
		Seed:            seed,
	}
}

// Validate checks c.
func (c Agent) Validate() error {
	switch {
	case c.Runs < 1:
		return fmt.Errorf("runs must be positive, got %d", c.Runs)
	case c.Tools < 1:
		return fmt.Errorf("tools must be positive, got %d", c.Tools)
	case c.ToolTokens < 0 || c.SystemTokens < 0:
		return fmt.Errorf("tool and system tokens must not be negative, got %d and %d", c.ToolTokens, c.SystemTokens)
	case c.TaskTokens < 1 || c.OutputTokens < 1:
		return fmt.Errorf("task and output tokens must be positive, got %d and %d", c.TaskTokens, c.OutputTokens)
	case c.MinResultTokens < 1 || c.MaxResultTokens < c.MinResultTokens:
		return fmt.Errorf("result tokens must satisfy 1 <= min <= max, got %d and %d", c.MinResultTokens, c.MaxResultTokens)
	case c.MinSteps < 1 || c.MaxSteps < c.MinSteps:
		return fmt.Errorf("steps must satisfy 1 <= min <= max, got %d and %d", c.MinSteps, c.MaxSteps)
	case c.ToolLatency < 0:
		return fmt.Errorf("tool latency must not be negative, got %v", c.ToolLatency)
	}
	return nil
}

// toolDef is an OpenAI function tool definition.
type toolDef struct {
	Type     string   `json:"type"`
	Function function `json:"function"`
}

type function struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

const toolParameters = `{"type":"object","properties":{"query":{"type":"string","description":"What to look up or do."}},"required":["query"]}`

// Generate returns the workload, with runs arriving as a Poisson process
// whose request rate is 1 per second.
func (c Agent) Generate() (*Workload, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tools := make([]json.RawMessage, c.Tools)
	for k := range tools {
		raw, err := json.Marshal(toolDef{Type: "function", Function: function{
			Name:        fmt.Sprintf("tool_%d", k),
			Description: Text(c.ToolTokens, c.Seed, hashString("tool"), uint64(k)),
			Parameters:  json.RawMessage(toolParameters),
		}})
		if err != nil {
			return nil, fmt.Errorf("encoding tool %d: %w", k, err)
		}
		tools[k] = raw
	}
	system := Text(c.SystemTokens, c.Seed, hashString("agent-system"))

	r := newRNG(c.Seed, hashString("agent"))
	convs := make([]*Conversation, c.Runs)
	turns := 0
	for i := range convs {
		cr := newRNG(c.Seed, hashString("agent-run"), uint64(i))
		conv := &Conversation{
			ID:     fmt.Sprintf("agent-%d", i),
			Prefix: []Message{{Role: "system", Content: system}},
			Tools:  tools,
			Turns:  make([]Turn, cr.between(c.MinSteps, c.MaxSteps)),
		}
		var prev *ToolCall
		for t := range conv.Turns {
			turn := &conv.Turns[t]
			turn.MaxTokens = c.OutputTokens
			if prev == nil {
				turn.Messages = []Message{{Role: "user", Content: Text(c.TaskTokens, c.Seed, hashString("agent-task"), uint64(i))}}
			} else {
				turn.Think = time.Duration(cr.exp(float64(c.ToolLatency)))
				result := Text(cr.between(c.MinResultTokens, c.MaxResultTokens), c.Seed, hashString("agent-result"), uint64(i), uint64(t))
				turn.Messages = []Message{{Role: "tool", Content: result, ToolCallID: prev.ID}}
			}
			if t == len(conv.Turns)-1 {
				break
			}
			args, err := json.Marshal(map[string]string{"query": Text(12, c.Seed, hashString("agent-args"), uint64(i), uint64(t))})
			if err != nil {
				return nil, err
			}
			turn.ToolCalls = []ToolCall{{
				ID:       fmt.Sprintf("call_%d_%d", i, t),
				Type:     "function",
				Function: FunctionCall{Name: fmt.Sprintf("tool_%d", cr.intn(c.Tools)), Arguments: string(args)},
			}}
			prev = &turn.ToolCalls[0]
		}
		turns += len(conv.Turns)
		convs[i] = conv
	}
	poissonStarts(convs, float64(len(convs))/float64(turns), r)
	return &Workload{
		Name: "agent",
		Description: fmt.Sprintf("%d runs of %d-%d steps, %d tools x %d tokens, system %d, task %d, results %d-%d, output %d tokens, tool latency %v",
			c.Runs, c.MinSteps, c.MaxSteps, c.Tools, c.ToolTokens, c.SystemTokens, c.TaskTokens, c.MinResultTokens, c.MaxResultTokens, c.OutputTokens, c.ToolLatency),
		Conversations: convs,
		Rate:          1,
	}, nil
}
