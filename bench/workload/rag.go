package workload

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// RAG configures retrieval-augmented sessions, a shape no router here was
// designed around: every request starts with one system prompt of
// SystemTokens tokens shared by all sessions, then a user message holding
// K documents retrieved from a corpus of CorpusDocs documents, in
// retrieval order, followed by a question of QuestionTokens tokens. The
// documents are drawn without replacement from a Zipf distribution of
// exponent Zipf over their popularity rank (document 0 the most popular),
// the first drawn first, as a retriever ranks them; each document is
// MinDocTokens to MaxDocTokens tokens, its length and text fixed by its id
// and the seed. A session then asks MinFollowUps to MaxFollowUps follow-up
// questions of FollowUpTokens tokens, each after an exponentially
// distributed think time of mean Think, on the whole history (documents,
// answers of OutputTokens tokens). Sessions arrive as a Poisson process.
//
// Two requests share a prefix beyond the system prompt only when their
// first documents are the same, and as deep as their retrieval lists
// agree: a popular document is the start of many prompts, the rest of the
// list mostly differs.
type RAG struct {
	Sessions       int
	SystemTokens   int
	CorpusDocs     int
	MinDocTokens   int
	MaxDocTokens   int
	Zipf           float64
	K              int
	QuestionTokens int
	MinFollowUps   int
	MaxFollowUps   int
	FollowUpTokens int
	OutputTokens   int
	Think          time.Duration
	Seed           uint64
}

// MaxZipf bounds RAG.Zipf: beyond it the least popular documents'
// weights underflow.
const MaxZipf = 8

// DefaultRAG returns a RAG workload of n sessions: a 500-token system
// prompt, 4 documents per request from a corpus of 500 documents of 200
// to 500 tokens under a Zipf popularity of exponent 1 (the most popular
// document is ~15% of draws, the ten most popular ~43%), 50-token
// questions, 0 to 3 follow-ups of 30 tokens after a mean 8 s think time,
// 120-token answers.
func DefaultRAG(n int, seed uint64) RAG {
	return RAG{
		Sessions:       n,
		SystemTokens:   500,
		CorpusDocs:     500,
		MinDocTokens:   200,
		MaxDocTokens:   500,
		Zipf:           1,
		K:              4,
		QuestionTokens: 50,
		MinFollowUps:   0,
		MaxFollowUps:   3,
		FollowUpTokens: 30,
		OutputTokens:   120,
		Think:          8 * time.Second,
		Seed:           seed,
	}
}

// Validate checks c.
func (c RAG) Validate() error {
	switch {
	case c.Sessions < 1:
		return fmt.Errorf("sessions must be positive, got %d", c.Sessions)
	case c.SystemTokens < 0:
		return fmt.Errorf("system tokens must not be negative, got %d", c.SystemTokens)
	case c.K < 1 || c.CorpusDocs < c.K:
		return fmt.Errorf("documents per request and corpus must satisfy 1 <= k <= corpus, got %d and %d", c.K, c.CorpusDocs)
	case c.MinDocTokens < 1 || c.MaxDocTokens < c.MinDocTokens:
		return fmt.Errorf("document tokens must satisfy 1 <= min <= max, got %d and %d", c.MinDocTokens, c.MaxDocTokens)
	case !(c.Zipf >= 0) || c.Zipf > MaxZipf:
		return fmt.Errorf("zipf exponent must be from 0 to %v, got %v", MaxZipf, c.Zipf)
	case c.QuestionTokens < 1 || c.FollowUpTokens < 1 || c.OutputTokens < 1:
		return fmt.Errorf("question, follow-up and output tokens must be positive, got %d, %d and %d", c.QuestionTokens, c.FollowUpTokens, c.OutputTokens)
	case c.MinFollowUps < 0 || c.MaxFollowUps < c.MinFollowUps:
		return fmt.Errorf("follow-ups must satisfy 0 <= min <= max, got %d and %d", c.MinFollowUps, c.MaxFollowUps)
	case c.Think < 0:
		return fmt.Errorf("think time must not be negative, got %v", c.Think)
	}
	return nil
}

// zipfWeights returns the popularity of ranks 0..n-1: 1/(rank+1)^s.
func zipfWeights(n int, s float64) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = math.Pow(float64(i+1), -s)
	}
	return w
}

// retrieve returns the K distinct documents of session i in retrieval
// order: each drawn in proportion to its weight among those not yet
// drawn.
func (c RAG) retrieve(i int, weights []float64) []int {
	r := newRNG(c.Seed, hashString("rag-retrieve"), uint64(i))
	total := 0.0
	for _, w := range weights {
		total += w
	}
	docs := make([]int, 0, c.K)
	for len(docs) < c.K {
		u := r.float() * total
		d := -1
		for j, w := range weights {
			if slices.Contains(docs, j) {
				continue
			}
			d = j // the last one left takes what rounding leaves over
			if u -= w; u < 0 {
				break
			}
		}
		docs = append(docs, d)
		total -= weights[d]
	}
	return docs
}

// document returns document d's text, headed by its id as a retriever's
// prompt template would.
func (c RAG) document(d int) string {
	n := newRNG(c.Seed, hashString("rag-doc-length"), uint64(d)).between(c.MinDocTokens, c.MaxDocTokens)
	return fmt.Sprintf("[document %d]\n%s", d, Text(n, c.Seed, hashString("rag-doc"), uint64(d)))
}

// Generate returns the workload, with sessions arriving as a Poisson
// process whose request rate is 1 per second.
func (c RAG) Generate() (*Workload, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	system := "You answer from the documents given. " + Text(c.SystemTokens, c.Seed, hashString("rag-system"))
	weights := zipfWeights(c.CorpusDocs, c.Zipf)
	docs := make(map[int]string)
	r := newRNG(c.Seed, hashString("rag"))
	convs := make([]*Conversation, c.Sessions)
	turns := 0
	for i := range convs {
		sr := newRNG(c.Seed, hashString("rag-session"), uint64(i))
		var b strings.Builder
		for _, d := range c.retrieve(i, weights) {
			text, ok := docs[d]
			if !ok {
				text = c.document(d)
				docs[d] = text
			}
			b.WriteString(text)
			b.WriteString("\n\n")
		}
		b.WriteString("Question: ")
		b.WriteString(Text(c.QuestionTokens, c.Seed, hashString("rag-question"), uint64(i)))
		conv := &Conversation{
			ID:     fmt.Sprintf("rag-%d", i),
			Prefix: []Message{{Role: "system", Content: system}},
			Turns:  make([]Turn, 1+sr.between(c.MinFollowUps, c.MaxFollowUps)),
		}
		conv.Turns[0] = Turn{Messages: []Message{{Role: "user", Content: b.String()}}, MaxTokens: c.OutputTokens}
		for t := 1; t < len(conv.Turns); t++ {
			conv.Turns[t] = Turn{
				Messages:  []Message{{Role: "user", Content: Text(c.FollowUpTokens, c.Seed, hashString("rag-follow-up"), uint64(i), uint64(t))}},
				MaxTokens: c.OutputTokens,
				Think:     time.Duration(sr.exp(float64(c.Think))),
			}
		}
		turns += len(conv.Turns)
		convs[i] = conv
	}
	poissonStarts(convs, float64(len(convs))/float64(turns), r)
	return &Workload{
		Name: "rag",
		Description: fmt.Sprintf("%d RAG sessions: system %d tokens, %d of %d documents of %d-%d tokens by Zipf(%g) popularity in retrieval order, question %d, %d-%d follow-ups of %d, output %d, think %v",
			c.Sessions, c.SystemTokens, c.K, c.CorpusDocs, c.MinDocTokens, c.MaxDocTokens, c.Zipf, c.QuestionTokens, c.MinFollowUps, c.MaxFollowUps, c.FollowUpTokens, c.OutputTokens, c.Think),
		Conversations: convs,
		Rate:          1,
	}, nil
}
