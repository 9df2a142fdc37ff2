package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// bodies returns the request bodies of w's conversations, answering every
// turn with a fixed text.
func bodies(t *testing.T, w *Workload) [][]byte {
	t.Helper()
	var out [][]byte
	for _, c := range w.Conversations {
		s := c.NewSession("m", true)
		for !s.Done() {
			_, b, err := s.Next()
			if err != nil {
				t.Fatalf("Next() error: %v", err)
			}
			out = append(out, b)
			s.Answer("the answer")
		}
	}
	return out
}

func generators() []struct {
	name string
	gen  func(seed uint64) (*Workload, error)
} {
	return []struct {
		name string
		gen  func(seed uint64) (*Workload, error)
	}{
		{"shared-prefix", func(seed uint64) (*Workload, error) {
			return SharedPrefix{Groups: 3, PromptsPerGroup: 2, SystemTokens: 50, QuestionTokens: 10, OutputTokens: 4, Requests: 20, Seed: seed}.Generate()
		}},
		{"chat", func(seed uint64) (*Workload, error) {
			c := DefaultChat(5, seed)
			c.SystemTokens, c.UserTokens = 50, 10
			return c.Generate()
		}},
		{"agent", func(seed uint64) (*Workload, error) {
			a := DefaultAgent(4, seed)
			a.SystemTokens, a.MinResultTokens, a.MaxResultTokens = 50, 5, 20
			return a.Generate()
		}},
		{"rag", func(seed uint64) (*Workload, error) {
			c := DefaultRAG(6, seed)
			c.SystemTokens, c.CorpusDocs, c.MinDocTokens, c.MaxDocTokens = 50, 20, 10, 30
			return c.Generate()
		}},
	}
}

func TestGeneratorsDeterministic(t *testing.T) {
	for _, tt := range generators() {
		t.Run(tt.name, func(t *testing.T) {
			w1, err := tt.gen(7)
			if err != nil {
				t.Fatal(err)
			}
			w2, _ := tt.gen(7)
			w3, _ := tt.gen(8)
			b1, b2, b3 := bodies(t, w1), bodies(t, w2), bodies(t, w3)
			if len(b1) != w1.Requests() {
				t.Fatalf("%d bodies, Requests() = %d", len(b1), w1.Requests())
			}
			for i := range b1 {
				if !bytes.Equal(b1[i], b2[i]) {
					t.Fatalf("seed 7 twice: body %d differs:\n%s\n%s", i, b1[i], b2[i])
				}
			}
			if bytes.Equal(bytes.Join(b1, nil), bytes.Join(b3, nil)) {
				t.Errorf("seeds 7 and 8 gave the same workload")
			}
			for i, c := range w1.Conversations {
				if i > 0 && c.Start < w1.Conversations[i-1].Start {
					t.Fatalf("conversation %d starts at %v, before %v", i, c.Start, w1.Conversations[i-1].Start)
				}
			}
		})
	}
}

func TestSessionBody(t *testing.T) {
	w, err := generators()[2].gen(1) // agent: tools, tool calls, tool results
	if err != nil {
		t.Fatal(err)
	}
	c := w.Conversations[0]
	s := c.NewSession("sim", true)
	var prev []byte
	for turn := 0; !s.Done(); turn++ {
		tr, body, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		var req struct {
			Model         string            `json:"model"`
			Messages      []Message         `json:"messages"`
			Tools         []json.RawMessage `json:"tools"`
			MaxTokens     int               `json:"max_tokens"`
			IgnoreEOS     bool              `json:"ignore_eos"`
			Stream        bool              `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if req.Model != "sim" || !req.Stream || !req.StreamOptions.IncludeUsage || !req.IgnoreEOS || req.MaxTokens != tr.MaxTokens || len(req.Tools) != 12 {
			t.Errorf("turn %d: model %q stream %v include_usage %v ignore_eos %v max_tokens %d tools %d", turn,
				req.Model, req.Stream, req.StreamOptions.IncludeUsage, req.IgnoreEOS, req.MaxTokens, len(req.Tools))
		}
		// The history grows: system, task, then per step an assistant
		// message with a tool call and a tool result.
		if want := 2 + 2*turn; len(req.Messages) != want {
			t.Errorf("turn %d: %d messages, want %d", turn, len(req.Messages), want)
		}
		if turn > 0 {
			a, tool := req.Messages[len(req.Messages)-2], req.Messages[len(req.Messages)-1]
			if a.Role != "assistant" || a.Content != "answer" || len(a.ToolCalls) != 1 {
				t.Errorf("turn %d: assistant message %+v", turn, a)
			}
			if tool.Role != "tool" || tool.ToolCallID != a.ToolCalls[0].ID {
				t.Errorf("turn %d: tool message %+v does not answer call %s", turn, tool, a.ToolCalls[0].ID)
			}
			// The previous request's messages are a prefix of this one's.
			var p struct{ Messages []Message }
			json.Unmarshal(prev, &p)
			for i, m := range p.Messages {
				if m.Content != req.Messages[i].Content || m.Role != req.Messages[i].Role {
					t.Errorf("turn %d: message %d changed", turn, i)
				}
			}
		}
		prev = body
		s.Answer("answer")
	}
	if _, _, err := s.Next(); err == nil {
		t.Errorf("Next() after the last turn: no error")
	}

	ns := c.NewSession("sim", false)
	_, body, _ := ns.Next()
	if bytes.Contains(body, []byte("stream_options")) || !bytes.Contains(body, []byte(`"stream":false`)) {
		t.Errorf("non-streaming body: %s", body[:min(len(body), 200)])
	}
}

func TestText(t *testing.T) {
	for _, n := range []int{0, 1, 2, 100} {
		s := Text(n, 1, 2)
		words := strings.Fields(s)
		if len(words) != n {
			t.Errorf("Text(%d) has %d words", n, len(words))
		}
		if n > 0 && len(s) != BytesPerToken*n-1 {
			t.Errorf("Text(%d) is %d bytes, want %d", n, len(s), BytesPerToken*n-1)
		}
	}
	if Text(50, 1) == Text(50, 2) {
		t.Errorf("Text with different seeds is equal")
	}
	if !strings.HasPrefix(Text(80, 3), Text(40, 3)) {
		t.Errorf("Text(40) is not a prefix of Text(80) with the same seed")
	}
}

func TestSharedPrefixWorkingSet(t *testing.T) {
	c := LLMDSharedPrefix(8*65536, 0.73, 10, 1)
	ws := float64(c.WorkingSet()) / float64(8*65536)
	if ws < 0.70 || ws > 0.73 {
		t.Errorf("LLMDSharedPrefix working set = %.3f of the KV capacity, want ~0.73", ws)
	}
	if err := (SharedPrefix{}).Validate(); err == nil {
		t.Errorf("zero SharedPrefix: no error")
	}
}

func TestMooncakeText(t *testing.T) {
	a := MooncakeText([]int64{0, 1, 2}, 1200)
	b := MooncakeText([]int64{0, 1, 5, 6}, 1800)
	common := 0
	for common < len(a) && common < len(b) && a[common] == b[common] {
		common++
	}
	// A full block is a newline and 511 words of 3 bytes with 510 spaces,
	// 4 x 512 - 4 bytes; the third blocks differ after their newline.
	if want := 2*(MooncakeBlockTokens*BytesPerToken-4) + 1; common != want {
		t.Errorf("common prefix of blocks [0 1 2] and [0 1 5 6] = %d bytes, want %d", common, want)
	}
	// The last block is cut to the input length: 1200 tokens are 176
	// tokens of the third block.
	if got := tokens(a); got != 1200 {
		t.Errorf("MooncakeText of 1200 tokens has %d tokens", got)
	}
	if a != MooncakeText([]int64{0, 1, 2}, 1200) {
		t.Errorf("MooncakeText is not deterministic")
	}
}

// tokens counts the tokens of synthetic text as the engine's tokenizer
// does: one per word, one per newline.
func tokens(s string) int {
	return len(strings.Fields(s)) + strings.Count(s, "\n")
}

func TestMooncakeLoad(t *testing.T) {
	lines := []string{
		`{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]}`,
		`{"timestamp": 1000, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 2]}`,
		`{"timestamp": 2000, "input_length": 300, "output_length": 5, "hash_ids": [0]}`,
		`{"timestamp": 3000, "input_length": 5000, "output_length": 5, "hash_ids": [0, 4, 5, 6, 7, 8, 9, 10, 11, 12]}`,
		`{"timestamp": 4000, "input_length": 700, "output_length": 10, "hash_ids": [0, 13]}`,
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		cfg    Mooncake
		starts []time.Duration
		ids    []string
	}{
		{"all", Mooncake{Path: path}, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}, []string{"mc-1", "mc-1", "mc-0", "mc-4", "mc-13"}},
		{"window", Mooncake{Path: path, Start: time.Second, Duration: 2 * time.Second}, []time.Duration{0, time.Second}, []string{"mc-1", "mc-0"}},
		{"max tokens", Mooncake{Path: path, MaxTokens: 2000}, []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second}, []string{"mc-1", "mc-1", "mc-0", "mc-13"}},
		{"max requests", Mooncake{Path: path, MaxRequests: 2}, []time.Duration{0, time.Second}, []string{"mc-1", "mc-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _, err := tt.cfg.Load()
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Conversations) != len(tt.starts) {
				t.Fatalf("Load() = %d requests, want %d", len(w.Conversations), len(tt.starts))
			}
			for i, c := range w.Conversations {
				if c.Start != tt.starts[i] || c.ID != tt.ids[i] {
					t.Errorf("request %d: start %v id %s, want %v %s", i, c.Start, c.ID, tt.starts[i], tt.ids[i])
				}
			}
		})
	}

	// Sampling keeps or drops a conversation's turns together.
	for seed := range uint64(20) {
		w, _, err := Mooncake{Path: path, Sample: 0.5, Seed: seed}.Load()
		if err != nil {
			continue // everything sampled out
		}
		n := 0
		for _, c := range w.Conversations {
			if c.ID == "mc-1" {
				n++
			}
		}
		if n != 0 && n != 2 {
			t.Errorf("seed %d: kept %d of conversation mc-1's 2 turns", seed, n)
		}
	}

	// The text fits the input length and the turn's messages are lazy.
	w, _, _ := Mooncake{Path: path}.Load()
	turn := &w.Conversations[1].Turns[0]
	msgs := turn.messages()
	if len(msgs) != 1 || tokens(msgs[0].Content) != 1100 || turn.MaxTokens != 10 {
		t.Errorf("request 1: %d messages, max_tokens %d", len(msgs), turn.MaxTokens)
	}

	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(`{"timestamp": 0, "input_length": 2000, "output_length": 1, "hash_ids": [0]}`+"\n"), 0o644)
	if _, _, err := (Mooncake{Path: bad}).Load(); err == nil {
		t.Errorf("Load() of a line whose input_length exceeds its blocks: no error")
	}
}

func TestMooncakeSpread(t *testing.T) {
	// Three requests at 0, two at 3 s, one at 6 s, as on the conversation
	// trace's grid; the ids name the trace order.
	lines := []string{
		`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}`,
		`{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0, 1]}`,
		`{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0, 2]}`,
		`{"timestamp": 3000, "input_length": 600, "output_length": 1, "hash_ids": [0, 3]}`,
		`{"timestamp": 3000, "input_length": 600, "output_length": 1, "hash_ids": [0, 4]}`,
		`{"timestamp": 6000, "input_length": 600, "output_length": 1, "hash_ids": [0, 5]}`,
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	grid := []time.Duration{0, 0, 0, 3 * time.Second, 3 * time.Second, 6 * time.Second}
	load := func(d time.Duration, seed uint64) []*Conversation {
		t.Helper()
		w, _, err := Mooncake{Path: path, Spread: d, Seed: seed}.Load()
		if err != nil {
			t.Fatal(err)
		}
		return w.Conversations
	}

	for i, c := range load(0, 1) {
		if c.Start != grid[i] {
			t.Errorf("no spread: request %d starts at %v, want %v", i, c.Start, grid[i])
		}
	}

	starts := func(convs []*Conversation) []time.Duration {
		var s []time.Duration
		for _, c := range convs {
			s = append(s, c.Start)
		}
		return s
	}
	a := load(3*time.Second, 1)
	for i, c := range a {
		// The order is the trace's and each start within its step.
		if want := fmt.Sprintf("mc-%d", i); c.ID != want {
			t.Errorf("spread: request %d is %s, want %s", i, c.ID, want)
		}
		if c.Start < grid[i] || c.Start >= grid[i]+3*time.Second {
			t.Errorf("spread: request %d starts at %v, outside [%v, %v)", i, c.Start, grid[i], grid[i]+3*time.Second)
		}
	}
	if s := starts(a); !slices.IsSorted(s) || s[0] == s[1] || s[1] == s[2] {
		t.Errorf("spread: starts %v, want increasing", s)
	}
	if !slices.Equal(starts(a), starts(load(3*time.Second, 1))) {
		t.Errorf("spread: two loads with one seed differ")
	}
	if slices.Equal(starts(a), starts(load(3*time.Second, 2))) {
		t.Errorf("spread: seeds 1 and 2 give the same starts %v", starts(a))
	}

	// A spread longer than the grid's step interleaves the steps and
	// keeps the requests sorted by start.
	if s := starts(load(10*time.Second, 1)); !slices.IsSorted(s) {
		t.Errorf("spread 10s: starts %v not sorted", s)
	}

	// SpreadGrid spreads over the grid's step, 3 s here: the same
	// starts as an explicit 3 s.
	if got, want := starts(load(SpreadGrid, 1)), starts(a); !slices.Equal(got, want) {
		t.Errorf("SpreadGrid: starts %v, want those of 3s %v", got, want)
	}
	if _, _, err := (Mooncake{Path: path, Spread: -time.Second}).Load(); err == nil {
		t.Errorf("Load with spread -1s: no error")
	}
}

func TestGridStep(t *testing.T) {
	at := func(ms ...int) []*Conversation {
		var convs []*Conversation
		for _, m := range ms {
			convs = append(convs, &Conversation{Start: time.Duration(m) * time.Millisecond})
		}
		return convs
	}
	for _, tt := range []struct {
		name   string
		starts []int
		want   time.Duration
	}{
		{"empty", nil, 0},
		{"one timestamp", []int{5, 5, 5}, 0},
		{"3 s grid", []int{0, 0, 0, 3000, 3000, 5999, 9001}, 2999 * time.Millisecond},
		{"distinct", []int{0, 12, 20, 55}, 8 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := GridStep(at(tt.starts...)); got != tt.want {
				t.Errorf("GridStep(%v) = %v, want %v", tt.starts, got, tt.want)
			}
		})
	}
}

func TestMooncakeRealTrace(t *testing.T) {
	path := filepath.Join("..", "..", DefaultMooncakeDir, "conversation_trace.jsonl")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("trace not available: %v", err)
	}
	w, st, err := Mooncake{Path: path, Duration: time.Minute}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if st.Kept == 0 || w.Rate <= 0 || len(w.Conversations) != st.Kept {
		t.Errorf("Load() kept %d, rate %v, %d conversations", st.Kept, w.Rate, len(w.Conversations))
	}
	// Its timestamps are on a ~3 s grid.
	if step := GridStep(w.Conversations); step < 2990*time.Millisecond || step > 3010*time.Millisecond {
		t.Errorf("GridStep of the conversation trace's first minute = %v, want ~3s", step)
	}
}
