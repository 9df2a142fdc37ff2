package caddymodule

import (
	"slices"
	"sync"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// What the engines answered about their caches (prefix_cache_usage),
// against what the index predicted: the hit rate the engines really
// had, per upstream, and how often the index was wrong about it.

// predictionSlack is how far, as a share of the prompt, the engine's
// cached share may differ from the index's predicted share and still
// count as predicted: routing text and the engine's tokens (its chat
// template included) do not measure a prompt alike, nor do the index's
// chunks and the engine's blocks cut it alike.
const predictionSlack = 0.25

// predictionOutcome compares one answer with its prediction; a bounded
// set, it is a metric label.
type predictionOutcome uint8

const (
	predictedWell predictionOutcome = iota // within predictionSlack
	lessCached                             // the engine had less than predicted: it evicted, or never held, the prefix
	moreCached                             // the engine had more: a prefix the index did not know of
)

var predictionNames = [...]string{predictedWell: "as_predicted", lessCached: "less_cached", moreCached: "more_cached"}

func (o predictionOutcome) String() string { return predictionNames[o] }

// answerCounts is what one upstream's answers said, and what was
// predicted for them.
type answerCounts struct {
	answers        uint64
	promptTokens   int64
	cachedTokens   int64
	routedBytes    int64 // routing text of the answered requests
	predictedBytes int64 // of which the index believed the upstream held
	outcomes       [len(predictionNames)]uint64
}

// answerTable is, per upstream ID of one index, its answerCounts.
type answerTable struct {
	mu sync.Mutex
	by map[prefixindex.ID]*answerCounts
}

// add counts one answer of id.
func (t *answerTable) add(id prefixindex.ID, u usage, routed, predicted int64, o predictionOutcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.by == nil {
		t.by = map[prefixindex.ID]*answerCounts{}
	}
	c := t.by[id]
	if c == nil {
		c = &answerCounts{}
		t.by[id] = c
	}
	c.answers++
	c.promptTokens += u.prompt
	c.cachedTokens += u.cached
	c.routedBytes += routed
	c.predictedBytes += predicted
	c.outcomes[o]++
}

// counts returns a copy of id's counts, and whether it has any.
func (t *answerTable) counts(id prefixindex.ID) (answerCounts, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.by[id]
	if c == nil {
		return answerCounts{}, false
	}
	return *c, true
}

// forget drops id's counts, when the index forgets id.
func (t *answerTable) forget(id prefixindex.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.by, id)
}

// answered gives each policy instance that routed the request what the
// engine said it had cached, once the response is written.
func (p *peeked) answered(u usage) {
	p.mu.Lock()
	views := slices.Clone(p.views)
	p.mu.Unlock()
	for _, v := range views {
		id, routed, uncached := v.charge.last()
		if id == 0 || routed <= 0 {
			continue // not routed by this instance
		}
		predicted := routed - uncached
		o := compare(float64(predicted)/float64(routed), float64(u.cached)/float64(u.prompt))
		v.owner.state.answers.add(id, u, routed, predicted, o)
		metrics.answered(u, o)
		if v.aged {
			st := v.owner.state
			st.capacities.answered(st.index, id, v.age, o)
		}
	}
}

// compare says how an answer's cached share of the prompt compares with
// the predicted share.
func compare(predicted, cached float64) predictionOutcome {
	switch {
	case cached < predicted-predictionSlack:
		return lessCached
	case cached > predicted+predictionSlack:
		return moreCached
	}
	return predictedWell
}
