package engine

import (
	"slices"
	"time"
)

// Finish reasons.
const (
	finishLength = "length" // max tokens reached
	finishStop   = "stop"   // EOS sampled
	finishAbort  = "abort"  // client gone or engine closed
)

// request is one sequence in the scheduler. It holds no text: the prompt is
// kept as the chained hashes of its full blocks plus the tokens of its last
// partial block, and generated text is recomputed from genSeed.
type request struct {
	// Fixed before the request is queued.
	id        uint64
	arrival   time.Time
	numPrompt int
	maxTokens int
	stopAt    int      // output count at which EOS is sampled, 0 for never
	eos       uint32   // EOS token id
	seed      uint64   // parent hash of the first block (cache salt)
	genSeed   uint64   // seeds the generated words
	leadSpace bool     // the first generated word has a leading space
	tokens    []uint32 // the prompt's tokens, kept only for KV events

	// Guarded by Engine.mu.
	hashes       []uint64 // chained hashes of the full blocks of prompt+output
	tail         []uint32 // tokens after the last full block
	numOutput    int      // tokens sampled
	numComputed  int      // tokens whose KV is computed
	blocks       []int32  // KV blocks, one per BlockSize tokens computed or scheduled
	numCached    int      // leading blocks registered in (or hit from) the cache
	cachedTokens int      // prefix-cache hit when first scheduled
	scheduled    bool     // scheduled at least once
	scheduledAt  time.Time
	firstToken   time.Time
	aborted      bool   // the client went away; the loop drops it
	finish       string // finish reason once done, "" while in progress

	notify chan struct{} // capacity 1: something changed
}

// newRequest builds a request from its prompt tokens.
func newRequest(tokens []uint32, seed uint64, blockSize int) *request {
	r := &request{
		numPrompt: len(tokens),
		seed:      seed,
		hashes:    make([]uint64, 0, len(tokens)/blockSize+1),
		tail:      make([]uint32, 0, blockSize),
		notify:    make(chan struct{}, 1),
	}
	parent := seed
	for len(tokens) >= blockSize {
		parent = chainHash(parent, tokens[:blockSize])
		r.hashes = append(r.hashes, parent)
		tokens = tokens[blockSize:]
	}
	r.tail = append(r.tail, tokens...)
	r.genSeed = mix64(chainHash(parent, r.tail) ^ 0x5851f42d4c957f2d)
	return r
}

func (r *request) numTokens() int { return r.numPrompt + r.numOutput }

func (r *request) done() bool { return r.finish != "" }

// appendToken records a sampled token, hashing the block it completes.
func (r *request) appendToken(t uint32, blockSize int) {
	r.tail = append(r.tail, t)
	if len(r.tail) == blockSize {
		parent := r.seed
		if len(r.hashes) > 0 {
			parent = r.hashes[len(r.hashes)-1]
		}
		r.hashes = append(r.hashes, chainHash(parent, r.tail))
		r.tail = r.tail[:0]
	}
	r.numOutput++
}

// signal wakes the request's handler without blocking.
func (r *request) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// scheduled is a request's share of a step: n tokens to compute.
type scheduled struct {
	r *request
	n int
}

// scheduler is vLLM V1's scheduler (vllm/v1/core/sched/scheduler.py)
// reduced to what routing quality depends on. It is not safe for concurrent
// use; Engine.mu guards it.
type scheduler struct {
	cfg     Config
	pool    *blockPool
	waiting []*request // FCFS; preempted requests go back to the front
	running []*request // admission order; preemption takes the last
	batch   []scheduled
	hits    []int32
	c       counters
	events  *kvEventLog // nil unless Config.KVEvents
}

// counters are the engine's statistics and metrics.
type counters struct {
	requests, finishedLength, finishedStop, aborted int64
	promptTokens, cachedTokens                      int64 // prefix cache queries and hits
	prefillTokens, generatedTokens                  int64
	preemptions, steps                              int64
	busy                                            time.Duration
	maxRunning, maxWaiting                          int
	ttft, e2e, prefill                              histogram
	// firstTokens is every request's time from arrival to first token,
	// the samples of ttft.
	firstTokens []time.Duration
}

func newScheduler(cfg Config) *scheduler {
	s := &scheduler{
		cfg:  cfg,
		pool: newBlockPool(cfg.KVBlocks),
		c: counters{
			ttft:    newHistogram(ttftBuckets),
			e2e:     newHistogram(e2eBuckets),
			prefill: newHistogram(e2eBuckets),
		},
	}
	if cfg.KVEvents {
		s.events = newKVEventLog(cfg.BlockSize)
		s.pool.trackRemoved = true
	}
	return s
}

func (s *scheduler) hasWork() bool { return len(s.waiting) > 0 || len(s.running) > 0 }

// blocksFor is the number of blocks holding n tokens.
func (s *scheduler) blocksFor(n int) int { return (n + s.cfg.BlockSize - 1) / s.cfg.BlockSize }

// add queues a new request.
func (s *scheduler) add(r *request) {
	s.c.requests++
	s.waiting = append(s.waiting, r)
	s.c.maxWaiting = max(s.c.maxWaiting, len(s.waiting))
}

// abort marks r as abandoned by its client. A waiting request leaves at
// once; a running one at the next step boundary, as vLLM aborts.
func (s *scheduler) abort(r *request) {
	if r.done() {
		return
	}
	r.aborted = true
	if i := slices.Index(s.waiting, r); i >= 0 {
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.finish(r, finishAbort, time.Now())
	}
}

// schedule picks the next step's work: running requests first (decodes and
// unfinished prefill chunks), preempting the most recently admitted when
// blocks run out, then, if nothing was preempted, waiting requests in order
// while the token budget, MaxNumSeqs and free blocks allow. It returns the
// batch and the step's prefill tokens and decoding sequences.
func (s *scheduler) schedule() (batch []scheduled, prefill, decodes int) {
	s.dropAborted()
	batch = s.batch[:0]
	budget := s.cfg.MaxNumBatchedTokens
	preempted := false
	for i := 0; i < len(s.running) && budget > 0; i++ {
		r := s.running[i]
		n := min(r.numTokens()-r.numComputed, budget)
		need := s.blocksFor(r.numComputed+n) - len(r.blocks)
		for need > s.pool.numFree() {
			victim := s.running[len(s.running)-1]
			s.running = s.running[:len(s.running)-1]
			s.preempt(victim)
			preempted = true
			if victim == r {
				break
			}
		}
		if i >= len(s.running) {
			break // r preempted itself
		}
		r.blocks, _ = s.pool.allocate(r.blocks, need)
		batch = append(batch, scheduled{r, n})
		if r.numOutput > 0 && n == 1 {
			decodes++
		} else {
			prefill += n
		}
		budget -= n
	}
	for !preempted && len(s.waiting) > 0 && budget > 0 && len(s.running) < s.cfg.MaxNumSeqs {
		r := s.waiting[0]
		// A full hit still recomputes the last token, as in vLLM, so at
		// most numTokens-1 tokens can come from the cache.
		maxHit := min((r.numTokens()-1)/s.cfg.BlockSize, len(r.hashes))
		s.hits = s.pool.lookup(s.hits[:0], r.hashes[:maxHit])
		hitTokens := len(s.hits) * s.cfg.BlockSize
		n := min(r.numTokens()-hitTokens, budget)
		need := s.blocksFor(hitTokens+n) - len(s.hits)
		evictable := 0 // hit blocks that are free now but will be pinned
		for _, id := range s.hits {
			if s.pool.blocks[id].ref == 0 {
				evictable++
			}
		}
		if need > s.pool.numFree()-evictable {
			break // FCFS: the head waits for blocks, the others wait behind it
		}
		for _, id := range s.hits {
			s.pool.touch(id)
		}
		r.blocks = append(r.blocks[:0], s.hits...)
		r.blocks, _ = s.pool.allocate(r.blocks, need)
		r.numComputed = hitTokens
		r.numCached = len(s.hits)
		if !r.scheduled {
			r.scheduled = true
			r.scheduledAt = time.Now()
			r.cachedTokens = hitTokens
			s.c.promptTokens += int64(r.numPrompt)
			s.c.cachedTokens += int64(hitTokens)
		}
		s.waiting[0] = nil
		s.waiting = s.waiting[1:]
		s.running = append(s.running, r)
		batch = append(batch, scheduled{r, n})
		prefill += n
		budget -= n
	}
	s.c.maxRunning = max(s.c.maxRunning, len(s.running))
	s.c.prefillTokens += int64(prefill)
	s.batch = batch
	return batch, prefill, decodes
}

// update applies a step that ended at now and took d: KV computed, full
// blocks cached, one token sampled per sequence whose tokens are all
// computed, finished requests freed.
func (s *scheduler) update(batch []scheduled, now time.Time, d time.Duration) {
	s.c.steps++
	s.c.busy += d
	bs := s.cfg.BlockSize
	for i, sc := range batch {
		batch[i] = scheduled{}
		r := sc.r
		if r.done() {
			continue
		}
		if r.aborted {
			s.finish(r, finishAbort, now)
			continue
		}
		r.numComputed += sc.n
		for r.numCached < len(r.hashes) && (r.numCached+1)*bs <= r.numComputed {
			registered := s.pool.cache(r.blocks[r.numCached], r.hashes[r.numCached])
			if s.events != nil {
				s.events.stored(r, r.numCached, registered)
			}
			r.numCached++
		}
		if r.numComputed < r.numTokens() {
			continue // chunked prefill: more chunks to come
		}
		stop := r.stopAt > 0 && r.numOutput+1 == r.stopAt
		tok := r.eos
		if !stop {
			tok = outputToken(r.genSeed, r.numOutput, r.leadSpace)
		}
		r.appendToken(tok, bs)
		s.c.generatedTokens++
		if r.numOutput == 1 {
			r.firstToken = now
			s.c.ttft.observe(now.Sub(r.arrival).Seconds())
			s.c.firstTokens = append(s.c.firstTokens, now.Sub(r.arrival))
			// vLLM's prefill time: from first scheduled to first token.
			s.c.prefill.observe(now.Sub(r.scheduledAt).Seconds())
		}
		switch {
		case stop:
			s.finish(r, finishStop, now)
		case r.numOutput >= r.maxTokens:
			s.finish(r, finishLength, now)
		default:
			r.signal()
		}
	}
	s.running = slices.DeleteFunc(s.running, (*request).done)
}

// preempt returns a running request to the front of the queue, freeing its
// blocks (vLLM's recompute preemption). Its cached blocks stay cached until
// evicted, so it may resume from them.
func (s *scheduler) preempt(r *request) {
	s.pool.release(r.blocks)
	r.blocks = r.blocks[:0]
	r.numComputed, r.numCached = 0, 0
	s.waiting = slices.Insert(s.waiting, 0, r)
	s.c.preemptions++
	s.c.maxWaiting = max(s.c.maxWaiting, len(s.waiting))
}

// finish ends r, frees its blocks and wakes its handler. The caller removes
// it from running.
func (s *scheduler) finish(r *request, reason string, now time.Time) {
	s.pool.release(r.blocks)
	r.blocks = nil
	r.finish = reason
	switch reason {
	case finishLength:
		s.c.finishedLength++
	case finishStop:
		s.c.finishedStop++
	default:
		s.c.aborted++
	}
	if reason != finishAbort {
		s.c.e2e.observe(now.Sub(r.arrival).Seconds())
	}
	r.signal()
}

// dropAborted finishes the aborted running requests.
func (s *scheduler) dropAborted() {
	now := time.Now()
	for _, r := range s.running {
		if r.aborted {
			s.finish(r, finishAbort, now)
		}
	}
	s.running = slices.DeleteFunc(s.running, (*request).done)
}

// abortAll finishes every request (the engine is closing).
func (s *scheduler) abortAll() {
	now := time.Now()
	for _, r := range s.running {
		s.finish(r, finishAbort, now)
	}
	for _, r := range s.waiting {
		s.finish(r, finishAbort, now)
	}
	s.running, s.waiting = nil, nil
}
