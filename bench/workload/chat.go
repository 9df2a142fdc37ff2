package workload

import (
	"fmt"
	"time"
)

// Chat configures multi-turn chat sessions: Conversations conversations of
// MinTurns to MaxTurns turns each; every conversation starts with one of
// Apps system prompts of SystemTokens tokens (many users share an app's
// system prompt), each turn adds a user message of UserTokens tokens to the
// history, which holds the previous answers of OutputTokens tokens, and the
// user thinks for an exponentially distributed time of mean Think between
// an answer and the next question.
type Chat struct {
	Conversations int
	Apps          int
	SystemTokens  int
	UserTokens    int
	OutputTokens  int
	MinTurns      int
	MaxTurns      int
	Think         time.Duration
	Seed          uint64
}

// DefaultChat returns a chat workload of n conversations: 4 apps with
// 1,000-token system prompts, 4 to 8 turns of 100-token questions and
// 200-token answers, 5 s mean think time.
func DefaultChat(n int, seed uint64) Chat {
	return Chat{
		Conversations: n,
		Apps:          4,
		SystemTokens:  1000,
		UserTokens:    100,
		OutputTokens:  200,
		MinTurns:      4,
		MaxTurns:      8,
		Think:         5 * time.Second,
		Seed:          seed,
	}
}

// Validate checks c.
func (c Chat) Validate() error {
	switch {
	case c.Conversations < 1:
		return fmt.Errorf("conversations must be positive, got %d", c.Conversations)
	case c.Apps < 1:
		return fmt.Errorf("apps must be positive, got %d", c.Apps)
	case c.SystemTokens < 0 || c.UserTokens < 1:
		return fmt.Errorf("system tokens must not be negative and user tokens must be positive, got %d and %d", c.SystemTokens, c.UserTokens)
	case c.OutputTokens < 1:
		return fmt.Errorf("output tokens must be positive, got %d", c.OutputTokens)
	case c.MinTurns < 1 || c.MaxTurns < c.MinTurns:
		return fmt.Errorf("turns must satisfy 1 <= min <= max, got %d and %d", c.MinTurns, c.MaxTurns)
	case c.Think < 0:
		return fmt.Errorf("think time must not be negative, got %v", c.Think)
	}
	return nil
}

// Generate returns the workload, with conversations arriving as a Poisson
// process whose request rate is 1 per second.
func (c Chat) Generate() (*Workload, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	systems := make([]string, c.Apps)
	for a := range systems {
		systems[a] = Text(c.SystemTokens, c.Seed, hashString("chat-system"), uint64(a))
	}
	r := newRNG(c.Seed, hashString("chat"))
	convs := make([]*Conversation, c.Conversations)
	turns := 0
	for i := range convs {
		cr := newRNG(c.Seed, hashString("chat-conversation"), uint64(i))
		conv := &Conversation{
			ID:     fmt.Sprintf("chat-%d", i),
			Prefix: []Message{{Role: "system", Content: systems[r.intn(c.Apps)]}},
			Turns:  make([]Turn, cr.between(c.MinTurns, c.MaxTurns)),
		}
		for t := range conv.Turns {
			conv.Turns[t] = Turn{
				Messages:  []Message{{Role: "user", Content: Text(c.UserTokens, c.Seed, hashString("chat-user"), uint64(i), uint64(t))}},
				MaxTokens: c.OutputTokens,
			}
			if t > 0 {
				conv.Turns[t].Think = time.Duration(cr.exp(float64(c.Think)))
			}
		}
		turns += len(conv.Turns)
		convs[i] = conv
	}
	poissonStarts(convs, float64(len(convs))/float64(turns), r)
	return &Workload{
		Name: "chat",
		Description: fmt.Sprintf("%d conversations of %d-%d turns, %d apps with %d-token system prompts, %d-token questions, %d-token answers, think %v",
			c.Conversations, c.MinTurns, c.MaxTurns, c.Apps, c.SystemTokens, c.UserTokens, c.OutputTokens, c.Think),
		Conversations: convs,
		Rate:          1,
	}, nil
}
