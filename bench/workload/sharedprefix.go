package workload

import (
	"errors"
	"fmt"
)

// SharedPrefix configures the shared-prefix workload of llm-d's and SGLang's
// prefix-routing benchmarks: Groups groups of PromptsPerGroup prompts; the
// prompts of a group share a system prompt of SystemTokens tokens and differ
// in their question of QuestionTokens tokens. Each request is one of the
// Groups x PromptsPerGroup prompts drawn uniformly at random, so prompts
// repeat, and carries its group as the session ID.
type SharedPrefix struct {
	Groups          int
	PromptsPerGroup int
	SystemTokens    int
	QuestionTokens  int
	OutputTokens    int
	Requests        int
	Seed            uint64
}

// WorkingSet returns the prompt tokens that must stay cached for every
// request to hit: each group's system prompt and all its questions.
func (c SharedPrefix) WorkingSet() int {
	return c.Groups * (c.SystemTokens + c.PromptsPerGroup*c.QuestionTokens)
}

// LLMDSharedPrefix returns the shape of llm-d's shared-prefix benchmark
// scaled to a fleet whose KV caches hold kvTokens tokens in total: groups
// of five prompts sharing a system prompt five times as long as their
// question (2,000 + 400 tokens here, a 2,400-token prompt being to the
// simulated engine's 65,536-token cache what a ~15k-token prompt is to an
// H100's), short outputs (128 tokens), and as many groups as make the
// working set fill the given fraction of kvTokens (llm-d runs at ~73%).
func LLMDSharedPrefix(kvTokens int, fraction float64, requests int, seed uint64) SharedPrefix {
	c := SharedPrefix{
		PromptsPerGroup: 5,
		SystemTokens:    2000,
		QuestionTokens:  400,
		OutputTokens:    128,
		Requests:        requests,
		Seed:            seed,
	}
	c.Groups = max(1, int(fraction*float64(kvTokens))/(c.SystemTokens+c.PromptsPerGroup*c.QuestionTokens))
	return c
}

// Validate checks c.
func (c SharedPrefix) Validate() error {
	switch {
	case c.Groups < 1:
		return fmt.Errorf("groups must be positive, got %d", c.Groups)
	case c.PromptsPerGroup < 1:
		return fmt.Errorf("prompts per group must be positive, got %d", c.PromptsPerGroup)
	case c.SystemTokens < 0 || c.QuestionTokens < 0:
		return errors.New("system and question tokens must not be negative")
	case c.SystemTokens+c.QuestionTokens < 1:
		return errors.New("a prompt must have at least one token")
	case c.OutputTokens < 1:
		return fmt.Errorf("output tokens must be positive, got %d", c.OutputTokens)
	case c.Requests < 1:
		return fmt.Errorf("requests must be positive, got %d", c.Requests)
	}
	return nil
}

// Generate returns the workload, with Poisson arrivals at 1 request per
// second (the driver rescales them).
func (c SharedPrefix) Generate() (*Workload, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// System prompts are made on first use and shared by the group's
	// requests.
	systems := make(map[int]string)
	system := func(g int) string {
		s, ok := systems[g]
		if !ok {
			s = "You are assistant " + fmt.Sprint(g) + ". " + Text(c.SystemTokens, c.Seed, hashString("system"), uint64(g))
			systems[g] = s
		}
		return s
	}
	r := newRNG(c.Seed, hashString("shared-prefix"))
	convs := make([]*Conversation, c.Requests)
	for i := range convs {
		g, p := r.intn(c.Groups), r.intn(c.PromptsPerGroup)
		convs[i] = &Conversation{
			ID:     fmt.Sprintf("group-%d", g),
			Prefix: []Message{{Role: "system", Content: system(g)}},
			Turns: []Turn{{
				Messages:  []Message{{Role: "user", Content: Text(c.QuestionTokens, c.Seed, hashString("question"), uint64(g), uint64(p))}},
				MaxTokens: c.OutputTokens,
			}},
		}
	}
	poissonStarts(convs, 1, r)
	return &Workload{
		Name: "shared-prefix",
		Description: fmt.Sprintf("%d groups x %d prompts, system %d + question %d tokens, output %d, %d requests, working set %d tokens",
			c.Groups, c.PromptsPerGroup, c.SystemTokens, c.QuestionTokens, c.OutputTokens, c.Requests, c.WorkingSet()),
		Conversations: convs,
		Rate:          1,
	}, nil
}
