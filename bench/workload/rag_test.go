package workload

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRAGSkew checks the retrieval statistics against the Zipf law they
// are drawn from: over 4,000 sessions of the default corpus (500
// documents, exponent 1), the first document drawn is document 0 with
// probability 1/H(500) = 0.147 and one of the ten most popular with
// probability H(10)/H(500) = 0.431, H(n) the n-th harmonic number.
func TestRAGSkew(t *testing.T) {
	c := DefaultRAG(4000, 1)
	weights := zipfWeights(c.CorpusDocs, c.Zipf)
	h := func(n int) float64 {
		s := 0.0
		for i := 1; i <= n; i++ {
			s += 1 / float64(i)
		}
		return s
	}
	first := make([]int, c.CorpusDocs)
	all := make([]int, c.CorpusDocs)
	for i := range c.Sessions {
		docs := c.retrieve(i, weights)
		if len(docs) != c.K {
			t.Fatalf("retrieve(%d) = %v, want %d documents", i, docs, c.K)
		}
		for k, d := range docs {
			if slices.Contains(docs[:k], d) {
				t.Fatalf("retrieve(%d) = %v: document %d twice", i, docs, d)
			}
			all[d]++
		}
		first[docs[0]]++
	}
	n := float64(c.Sessions)
	if got, want := float64(first[0])/n, 1/h(500); math.Abs(got-want) > 0.02 {
		t.Errorf("document 0 first in %.3f of sessions, want %.3f ± 0.02", got, want)
	}
	top := 0
	for _, k := range first[:10] {
		top += k
	}
	if got, want := float64(top)/n, h(10)/h(500); math.Abs(got-want) > 0.025 {
		t.Errorf("the ten most popular first in %.3f of sessions, want %.3f ± 0.025", got, want)
	}
	// Popularity falls with rank over all draws.
	if !(all[0] > all[9] && all[9] > all[99]) {
		t.Errorf("draws of documents 0, 9, 99 = %d, %d, %d, want decreasing", all[0], all[9], all[99])
	}

	// Exponent 0 is uniform: document 0 first in about 1/500.
	u := c
	u.Zipf = 0
	uw := zipfWeights(u.CorpusDocs, u.Zipf)
	zero := 0
	for i := range u.Sessions {
		if u.retrieve(i, uw)[0] == 0 {
			zero++
		}
	}
	if zero > 30 {
		t.Errorf("uniform: document 0 first in %d of %d sessions, want about 8", zero, u.Sessions)
	}
}

// TestRAGSharing checks what the requests share: every one starts with
// the one system prompt; a session's first request holds its documents
// in retrieval order, each the same text in every session that
// retrieves it, then the question; follow-ups extend the history.
func TestRAGSharing(t *testing.T) {
	c := DefaultRAG(40, 3)
	c.SystemTokens, c.CorpusDocs, c.MinDocTokens, c.MaxDocTokens = 60, 30, 20, 40
	c.MinFollowUps, c.MaxFollowUps = 1, 3
	w, err := c.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if w.Requests() < 2*c.Sessions || w.Requests() > 4*c.Sessions {
		t.Errorf("Requests() = %d, want 2 to 4 per session of %d", w.Requests(), c.Sessions)
	}
	weights := zipfWeights(c.CorpusDocs, c.Zipf)
	system := w.Conversations[0].Prefix[0].Content
	docText := map[int]string{}
	byFirst := map[int][]string{} // first document -> first user messages
	for _, conv := range w.Conversations {
		if len(conv.Prefix) != 1 || conv.Prefix[0].Content != system {
			t.Fatalf("%s: prefix %v, want the shared system prompt", conv.ID, conv.Prefix)
		}
		var i int
		if _, err := fmt.Sscanf(conv.ID, "rag-%d", &i); err != nil {
			t.Fatal(err)
		}
		msg := conv.Turns[0].Messages[0].Content
		rest := msg
		docs := c.retrieve(i, weights)
		for _, d := range docs {
			head := fmt.Sprintf("[document %d]\n", d)
			if !strings.HasPrefix(rest, head) {
				t.Fatalf("%s: want document %d next (retrieval order %v), got %.40q", conv.ID, d, docs, rest)
			}
			text, _, _ := strings.Cut(rest, "\n\n")
			if prev, ok := docText[d]; ok && prev != text {
				t.Errorf("document %d differs between sessions", d)
			}
			docText[d] = text
			rest = rest[len(text)+2:]
		}
		if !strings.HasPrefix(rest, "Question: ") {
			t.Errorf("%s: after the documents %.40q, want the question", conv.ID, rest)
		}
		byFirst[docs[0]] = append(byFirst[docs[0]], msg)
		for k, turn := range conv.Turns[1:] {
			if len(turn.Messages) != 1 || turn.Messages[0].Role != "user" || turn.Think <= 0 {
				t.Errorf("%s follow-up %d: %v, think %v", conv.ID, k+1, turn.Messages, turn.Think)
			}
		}
	}
	// Sessions whose retrieval starts alike share that document's text.
	shared := 0
	for d, msgs := range byFirst {
		for _, m := range msgs[1:] {
			if !strings.HasPrefix(m, docText[d]) || !strings.HasPrefix(msgs[0], docText[d]) {
				t.Errorf("two sessions retrieving %d first do not share its text", d)
			}
			shared++
		}
	}
	if shared == 0 {
		t.Errorf("no two sessions share a first document")
	}
	// A follow-up's body extends its first request's.
	b := bodies(t, &Workload{Conversations: w.Conversations[:1]})
	if len(b) < 2 || !strings.HasPrefix(string(b[1]), string(b[0][:len(b[0])-200])) {
		t.Errorf("the follow-up's body does not extend the first request's")
	}
}

func TestRAGValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*RAG)
	}{
		{"no sessions", func(c *RAG) { c.Sessions = 0 }},
		{"k above corpus", func(c *RAG) { c.K = c.CorpusDocs + 1 }},
		{"no documents", func(c *RAG) { c.K = 0 }},
		{"doc tokens reversed", func(c *RAG) { c.MinDocTokens, c.MaxDocTokens = 10, 5 }},
		{"negative zipf", func(c *RAG) { c.Zipf = -1 }},
		{"NaN zipf", func(c *RAG) { c.Zipf = math.NaN() }},
		{"zipf too steep", func(c *RAG) { c.Zipf = MaxZipf + 1 }},
		{"follow-ups reversed", func(c *RAG) { c.MinFollowUps, c.MaxFollowUps = 3, 1 }},
		{"negative think", func(c *RAG) { c.Think = -time.Second }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultRAG(10, 1)
			tt.edit(&c)
			if _, err := c.Generate(); err == nil {
				t.Errorf("Generate() of %+v: no error", c)
			}
		})
	}
	if err := DefaultRAG(10, 1).Validate(); err != nil {
		t.Errorf("DefaultRAG: %v", err)
	}
}
