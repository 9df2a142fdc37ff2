package fleet

import (
	"sync"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// What the engines answered about their caches (their usage's
// cached_tokens), against what the index predicted: the hit rate the
// engines really had, per upstream, and how often the index was wrong
// about it.

// predictionSlack is how far, as a share of the prompt, the engine's
// cached share may differ from the index's predicted share and still
// count as predicted: routing text and the engine's tokens (its chat
// template included) do not measure a prompt alike, nor do the index's
// chunks and the engine's blocks cut it alike.
const predictionSlack = 0.25

// Outcome compares one answer with its prediction; a bounded set, it
// may be a metric label.
type Outcome uint8

const (
	AsPredicted Outcome = iota // within the slack
	LessCached                 // the engine had less than predicted: it evicted, or never held, the prefix
	MoreCached                 // the engine had more: a prefix the index did not know of
	numOutcomes
)

// Outcomes lists every Outcome.
var Outcomes = [numOutcomes]Outcome{AsPredicted, LessCached, MoreCached}

var outcomeNames = [numOutcomes]string{AsPredicted: "as_predicted", LessCached: "less_cached", MoreCached: "more_cached"}

func (o Outcome) String() string { return outcomeNames[o] }

// Answer is what one engine's answer said of its cache, and what was
// predicted for it.
type Answer struct {
	// PromptTokens and CachedTokens are the answer's usage.
	PromptTokens, CachedTokens int64
	// RoutedBytes is the request's routing text, and PredictedBytes the
	// part of it the index believed the upstream held.
	RoutedBytes, PredictedBytes int64
}

// Answers is what one upstream's answers said, and what was predicted
// for them.
type Answers struct {
	Answers                     uint64
	PromptTokens, CachedTokens  int64
	RoutedBytes, PredictedBytes int64
	Outcomes                    [numOutcomes]uint64 // by Outcome
}

// answerTable is, per upstream ID, its Answers.
type answerTable struct {
	mu sync.Mutex
	by map[prefixindex.ID]*Answers
}

// Answered counts one answer of id's engine, with a prompt (a.PromptTokens
// and a.RoutedBytes) greater than 0, and returns how it compares with its
// prediction.
func (f *Fleet) Answered(id prefixindex.ID, a Answer) Outcome {
	o := compare(float64(a.PredictedBytes)/float64(a.RoutedBytes), float64(a.CachedTokens)/float64(a.PromptTokens))
	f.answers.add(id, a, o)
	return o
}

// Answers returns what id's engine answered so far, and whether it
// answered.
func (f *Fleet) Answers(id prefixindex.ID) (Answers, bool) { return f.answers.counts(id) }

// add counts one answer of id.
func (t *answerTable) add(id prefixindex.ID, a Answer, o Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.by == nil {
		t.by = map[prefixindex.ID]*Answers{}
	}
	c := t.by[id]
	if c == nil {
		c = &Answers{}
		t.by[id] = c
	}
	c.Answers++
	c.PromptTokens += a.PromptTokens
	c.CachedTokens += a.CachedTokens
	c.RoutedBytes += a.RoutedBytes
	c.PredictedBytes += a.PredictedBytes
	c.Outcomes[o]++
}

// counts returns a copy of id's counts, and whether it has any.
func (t *answerTable) counts(id prefixindex.ID) (Answers, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.by[id]
	if c == nil {
		return Answers{}, false
	}
	return *c, true
}

// forget drops id's counts.
func (t *answerTable) forget(id prefixindex.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.by, id)
}

// compare says how an answer's cached share of the prompt compares with
// the predicted share.
func compare(predicted, cached float64) Outcome {
	switch {
	case cached < predicted-predictionSlack:
		return LessCached
	case cached > predicted+predictionSlack:
		return MoreCached
	}
	return AsPredicted
}
