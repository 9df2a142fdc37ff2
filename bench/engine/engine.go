package engine

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Engine is one simulated inference engine: an HTTP handler for the
// OpenAI- and Anthropic-compatible endpoints, a KV block prefix cache, and a
// step loop running in its own goroutine until [Engine.Close].
type Engine struct {
	cfg     Config
	mux     *http.ServeMux
	idTag   string // distinguishes response ids of engines in one process
	created int64  // Unix time, for /v1/models

	wake      chan struct{} // capacity 1: work was queued
	quit      chan struct{} // closed by Close
	done      chan struct{} // closed when the loop has exited
	closeOnce sync.Once
	gate      <-chan struct{} // tests only: one receive per step

	mu      sync.Mutex
	sched   *scheduler
	closed  bool
	nextID  uint64
	changed chan struct{} // closed on any state change, if anyone waits
}

// engineSeq numbers the engines of the process.
var engineSeq atomic.Uint64

// errClosed is returned to handlers whose request the closing engine drops.
var errClosed = errors.New("engine is closed")

// maxLag bounds how far the step clock may trail real time before it is
// reset: up to it, a step that started late (Go scheduling, lock waits) is
// shortened so that busy periods last as long as simulated.
const maxLag = 5 * time.Millisecond

// New validates cfg and starts an engine's step loop. Serve it with any
// http.Server, or use [StartFleet].
func New(cfg Config) (*Engine, error) {
	return newEngine(cfg, nil)
}

func newEngine(cfg Config, gate <-chan struct{}) (*Engine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:     cfg,
		mux:     http.NewServeMux(),
		idTag:   strconv.FormatUint(engineSeq.Add(1), 36),
		created: time.Now().Unix(),
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		gate:    gate,
		sched:   newScheduler(cfg),
	}
	e.mux.HandleFunc("POST /v1/chat/completions", e.handleChat)
	e.mux.HandleFunc("POST /v1/completions", e.handleCompletions)
	e.mux.HandleFunc("POST /v1/messages", e.handleMessages)
	e.mux.HandleFunc("GET /health", e.handleHealth)
	e.mux.HandleFunc("GET /v1/models", e.handleModels)
	e.mux.HandleFunc("GET /metrics", e.handleMetrics)
	e.mux.HandleFunc("POST /reset_prefix_cache", e.handleResetPrefixCache)
	e.mux.HandleFunc("GET /kv_events", e.handleKVEvents)
	go e.loop()
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// ServeHTTP serves the engine's endpoints:
//
//	POST /v1/chat/completions  OpenAI chat completions, streaming or not
//	POST /v1/completions       OpenAI completions, streaming or not
//	POST /v1/messages          Anthropic messages, streaming or not
//	GET  /health               200, or 503 once closed
//	GET  /v1/models            the configured model
//	GET  /metrics              Prometheus text format, vLLM metric names
//	POST /reset_prefix_cache   evict every unpinned cached block
//	GET  /kv_events            KV cache events, if Config.KVEvents (see kvevents.go)
func (e *Engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mux.ServeHTTP(w, r)
}

// Close stops the step loop and waits for it to exit. Requests in progress
// end: streams stop without [DONE], others get 503. Close is idempotent.
func (e *Engine) Close() {
	e.closeOnce.Do(func() { close(e.quit) })
	<-e.done
}

// ResetPrefixCache evicts every cached block not in use by a running
// request, as vLLM's /reset_prefix_cache does, so that a benchmark can start
// cold without restarting the engine.
func (e *Engine) ResetPrefixCache() {
	e.mu.Lock()
	e.sched.pool.reset()
	e.publishLocked()
	e.broadcastLocked()
	e.mu.Unlock()
}

// Stats is a snapshot of an engine's counters and state. Prompt and cached
// tokens count as vLLM's prefix-cache metrics do, once per request when it
// is first scheduled, and equal the sums of the requests' reported usage, so
// CachedTokens / PromptTokens is the token-weighted hit rate.
type Stats struct {
	Requests        int64         // requests queued
	Finished        int64         // requests completed (max tokens or EOS)
	Aborted         int64         // requests dropped: client gone or engine closed
	PromptTokens    int64         // prompt tokens of the requests scheduled
	CachedTokens    int64         // of those, tokens found in the prefix cache
	PrefillTokens   int64         // tokens computed by prefill, recomputation included
	GeneratedTokens int64         // tokens sampled
	Preemptions     int64         // running requests sent back to the queue for want of KV blocks
	Steps           int64         // steps executed
	BusyTime        time.Duration // sum of step durations, after TimeScale
	Running         int           // requests running now
	Waiting         int           // requests waiting now
	MaxRunning      int           // most requests running at once
	MaxWaiting      int           // most requests waiting at once
	KVBlocks        int           // capacity in blocks
	KVBlocksUsed    int           // blocks pinned by running requests
	KVBlocksCached  int           // blocks holding a cached prefix, pinned or not
}

// HitRate is CachedTokens / PromptTokens, 0 before any request.
func (s Stats) HitRate() float64 {
	if s.PromptTokens == 0 {
		return 0
	}
	return float64(s.CachedTokens) / float64(s.PromptTokens)
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.statsLocked()
}

// FirstTokenTimes returns, for every request that has had its first
// token, the wall time from its arrival to that token: the engine's own
// TTFT, without the path from the client to the engine.
func (e *Engine) FirstTokenTimes() []time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.sched.c.firstTokens)
}

func (e *Engine) statsLocked() Stats {
	s, c := e.sched, e.sched.c
	return Stats{
		Requests:        c.requests,
		Finished:        c.finishedLength + c.finishedStop,
		Aborted:         c.aborted,
		PromptTokens:    c.promptTokens,
		CachedTokens:    c.cachedTokens,
		PrefillTokens:   c.prefillTokens,
		GeneratedTokens: c.generatedTokens,
		Preemptions:     c.preemptions,
		Steps:           c.steps,
		BusyTime:        c.busy,
		Running:         len(s.running),
		Waiting:         len(s.waiting),
		MaxRunning:      c.maxRunning,
		MaxWaiting:      c.maxWaiting,
		KVBlocks:        e.cfg.KVBlocks,
		KVBlocksUsed:    e.cfg.KVBlocks - s.pool.numFree(),
		KVBlocksCached:  s.pool.numCached(),
	}
}

// usageLocked is vllm:kv_cache_usage_perc: the fraction of blocks pinned.
func (e *Engine) usageLocked() float64 {
	return 1 - float64(e.sched.pool.numFree())/float64(e.cfg.KVBlocks)
}

// changedLocked returns a channel closed at the next state change.
func (e *Engine) changedLocked() <-chan struct{} {
	if e.changed == nil {
		e.changed = make(chan struct{})
	}
	return e.changed
}

func (e *Engine) broadcastLocked() {
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// loop is the engine core: wait for work, schedule a step, sleep for its
// duration, apply it.
func (e *Engine) loop() {
	defer close(e.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var clock time.Time // when the previous step ended, in simulated time
	for {
		e.mu.Lock()
		idle := false
		for !e.sched.hasWork() {
			e.mu.Unlock()
			idle = true
			select {
			case <-e.wake:
			case <-e.quit:
				e.shutdown()
				return
			}
			e.mu.Lock()
		}
		e.mu.Unlock()

		if e.gate != nil {
			select {
			case <-e.gate:
			case <-e.quit:
				e.shutdown()
				return
			}
		}

		e.mu.Lock()
		batch, prefill, decodes := e.sched.schedule()
		e.publishLocked()
		if len(batch) == 0 {
			// Only aborted requests were left; they are gone now.
			e.broadcastLocked()
			e.mu.Unlock()
			continue
		}
		e.mu.Unlock()

		d := e.cfg.scale(e.cfg.stepTime(prefill, decodes))
		now := time.Now()
		if idle || clock.Before(now.Add(-maxLag)) {
			clock = now
		}
		clock = clock.Add(d)
		if wait := time.Until(clock); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-e.quit:
				e.shutdown()
				return
			}
		}

		e.mu.Lock()
		e.sched.update(batch, time.Now(), d)
		e.publishLocked()
		e.broadcastLocked()
		e.mu.Unlock()
	}
}

// shutdown ends every request; the loop is exiting.
func (e *Engine) shutdown() {
	e.mu.Lock()
	e.closed = true
	e.sched.abortAll()
	e.broadcastLocked()
	e.mu.Unlock()
}

// submit queues r; false if the engine is closed.
func (e *Engine) submit(r *request) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	e.nextID++
	r.id = e.nextID
	e.sched.add(r)
	e.broadcastLocked()
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return true
}

// abort drops r, whose client went away.
func (e *Engine) abort(r *request) {
	e.mu.Lock()
	e.sched.abort(r)
	e.broadcastLocked()
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// genParams is a parsed request, whatever its API.
type genParams struct {
	tokens    []uint32 // prompt
	salt      string   // cache_salt
	maxTokens int
	ignoreEOS bool
	leadSpace bool   // completions: the output continues the prompt's text
	eos       uint32 // token sampled at a natural stop
}

// progress is a request's state as its handler sees it.
type progress struct {
	promptTokens int
	cachedTokens int
	outputTokens int
	finish       string // "" while running
}

// generate runs one request: the API server's latency, the queue, the steps.
// It calls emit with the text of the tokens sampled since the last call, as
// they come, and returns the final state. Prompts longer than the KV cache
// minus the output are truncated to their leading tokens; max tokens is
// capped at the cache size minus one token.
func (e *Engine) generate(ctx context.Context, arrival time.Time, p genParams, emit func(text string, pr progress) error) (progress, error) {
	maxLen := e.cfg.maxModelLen()
	maxTokens := min(p.maxTokens, maxLen-1)
	tokens := p.tokens[:min(len(p.tokens), maxLen-maxTokens)]
	r := newRequest(tokens, saltSeed(p.salt), e.cfg.BlockSize)
	if e.cfg.KVEvents {
		r.tokens = tokens
	}
	r.arrival = arrival
	r.maxTokens = maxTokens
	r.eos = p.eos
	r.leadSpace = p.leadSpace
	if !p.ignoreEOS && e.cfg.MeanOutputTokens > 0 {
		r.stopAt = 1 + int(mix64(r.genSeed^0x632be59bd9b4e019)%uint64(2*e.cfg.MeanOutputTokens))
	}

	// The API server's latency counts from arrival, so the real time spent
	// parsing and tokenizing is part of it, not added to it.
	if d := time.Until(arrival.Add(e.cfg.scale(e.cfg.frontendTime(r.numPrompt)))); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return progress{}, ctx.Err()
		case <-e.quit:
			t.Stop()
			return progress{}, errClosed
		}
	}
	if !e.submit(r) {
		return progress{}, errClosed
	}

	sent := 0
	var text strings.Builder
	for {
		select {
		case <-r.notify:
		case <-ctx.Done():
			e.abort(r)
			return progress{}, ctx.Err()
		}
		e.mu.Lock()
		pr := progress{
			promptTokens: r.numPrompt,
			cachedTokens: r.cachedTokens,
			outputTokens: r.numOutput,
			finish:       r.finish,
		}
		e.mu.Unlock()
		if pr.finish == finishAbort {
			return pr, errClosed
		}
		visible := pr.outputTokens
		if pr.finish == finishStop {
			visible-- // EOS is not text
		}
		if visible > sent {
			text.Reset()
			for i := sent; i < visible; i++ {
				text.WriteString(outputText(r.genSeed, i, r.leadSpace))
			}
			sent = visible
			if err := emit(text.String(), pr); err != nil {
				e.abort(r)
				return pr, err
			}
		}
		if pr.finish != "" {
			return pr, nil
		}
	}
}
