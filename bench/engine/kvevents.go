package engine

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// KV cache events, as vLLM publishes them (vllm-project/vllm
// vllm/distributed/kv_events.py at b4e69e0af33f, BlockStored, BlockRemoved,
// AllBlocksCleared, KVEventBatch, ZmqEventPublisher; enabled by
// --kv-events-config; newer vLLM adds the medium field): every change to the
// prefix cache is an event, events are grouped in batches, and every batch
// carries the next number of one sequence per engine, so a subscriber
// applies them in order and can tell when it missed one. vLLM sends the
// batches, msgpack-encoded, on a ZMQ PUB socket and keeps the last ones
// for replay on a ROUTER socket; this engine streams them, JSON-encoded,
// one batch per line, on GET /kv_events, and keeps the last
// KVEventBufferBatches for a subscriber that asks to start from an older
// sequence number (?start=N). The events are vLLM's:
//
//	{"type":"BlockStored","block_hashes":[h...],"parent_block_hash":p|null,
//	 "token_ids":[t...],"block_size":16,"lora_id":null,"medium":"GPU"}
//	{"type":"BlockRemoved","block_hashes":[h...],"medium":"GPU"}
//	{"type":"AllBlocksCleared"}
//
// A BlockStored event holds a run of consecutive blocks of one sequence,
// the first one's parent (null for a sequence's first block) and the
// tokens of all of them, block_size per block, so a router that tokenizes
// the prompt as the engine does can compute its own hash of each block.
// Blocks are stored when their KV is computed (the end of the step, see
// the package documentation) and removed when evicted. A block whose
// prefix another block already holds is not stored again, and only
// evictions of a stored prefix are published, so the stream describes the
// engine's cache exactly: replaying it gives the set of cached prefixes.
//
// Batches are published when the step loop changes the cache: after a
// step is scheduled (its evictions) and after it ends (its stored blocks).

// KVEventBufferBatches is how many past batches an engine keeps for a
// subscriber that asks to start from an older sequence number. vLLM keeps
// 10,000 (buffer_steps); this keeps fewer, as a batch of a prefill step
// holds the tokens of up to 512 blocks, and the benchmark's subscribers
// read the stream live.
const KVEventBufferBatches = 1024

// kvEvent is one event of a batch; Type tells which fields are set.
type kvEvent struct {
	Type        string   `json:"type"`
	BlockHashes []uint64 `json:"block_hashes,omitempty"`
	Parent      *uint64  `json:"parent_block_hash"`
	TokenIDs    []uint32 `json:"token_ids,omitempty"`
	BlockSize   int      `json:"block_size,omitempty"`
	LoRAID      *int     `json:"lora_id"`
	Medium      string   `json:"medium,omitempty"`
}

// MarshalJSON writes only the fields of the event's type, with vLLM's
// nulls (parent_block_hash and lora_id of BlockStored).
func (ev kvEvent) MarshalJSON() ([]byte, error) {
	switch ev.Type {
	case "BlockStored":
		type stored kvEvent
		return json.Marshal(stored(ev))
	case "BlockRemoved":
		return json.Marshal(struct {
			Type        string   `json:"type"`
			BlockHashes []uint64 `json:"block_hashes"`
			Medium      string   `json:"medium"`
		}{ev.Type, ev.BlockHashes, ev.Medium})
	default:
		return json.Marshal(struct {
			Type string `json:"type"`
		}{ev.Type})
	}
}

// kvEventBatch is what one line of /kv_events holds.
type kvEventBatch struct {
	Seq    uint64    `json:"seq"`
	TS     float64   `json:"ts"`
	Events []kvEvent `json:"events"`
}

// kvEventLog collects an engine's events and keeps its recent batches.
// Engine.mu guards it.
type kvEventLog struct {
	blockSize int
	pending   []kvEvent

	// The BlockStored event being extended: the request whose blocks it
	// holds and the index of the block that would extend it.
	run     *kvEvent
	runReq  *request
	runNext int

	ring  []kvEventBatch // at most KVEventBufferBatches, oldest first
	start int            // index of the oldest batch in ring
	next  uint64         // sequence number of the next batch
}

func newKVEventLog(blockSize int) *kvEventLog {
	return &kvEventLog{blockSize: blockSize}
}

// stored records that block k of r was cached (registered) or found
// already held by another block (not registered, so not stored again).
func (l *kvEventLog) stored(r *request, k int, registered bool) {
	if !registered {
		l.closeRun()
		return
	}
	if l.run == nil || l.runReq != r || l.runNext != k {
		l.closeRun()
		l.run = &kvEvent{Type: "BlockStored", BlockSize: l.blockSize, Medium: "GPU"}
		if k > 0 {
			parent := r.hashes[k-1]
			l.run.Parent = &parent
		}
		l.runReq = r
	}
	l.run.BlockHashes = append(l.run.BlockHashes, r.hashes[k])
	l.run.TokenIDs = r.appendBlockTokens(l.run.TokenIDs, k, l.blockSize)
	l.runNext = k + 1
}

func (l *kvEventLog) closeRun() {
	if l.run != nil {
		l.pending = append(l.pending, *l.run)
		l.run, l.runReq = nil, nil
	}
}

// removed records the eviction of the cached prefixes hashes.
func (l *kvEventLog) removed(hashes []uint64) {
	if len(hashes) == 0 {
		return
	}
	l.closeRun()
	l.pending = append(l.pending, kvEvent{Type: "BlockRemoved", BlockHashes: append([]uint64(nil), hashes...), Medium: "GPU"})
}

// publish turns the pending events into the next batch and reports
// whether there was any.
func (l *kvEventLog) publish(now time.Time) bool {
	l.closeRun()
	if len(l.pending) == 0 {
		return false
	}
	b := kvEventBatch{Seq: l.next, TS: float64(now.UnixNano()) / 1e9, Events: l.pending}
	l.pending = nil
	l.next++
	if len(l.ring) < KVEventBufferBatches {
		l.ring = append(l.ring, b)
	} else {
		l.ring[l.start] = b
		l.start = (l.start + 1) % len(l.ring)
	}
	return true
}

// since appends to dst the kept batches numbered from seq on, oldest
// first.
func (l *kvEventLog) since(dst []kvEventBatch, seq uint64) []kvEventBatch {
	for i := range l.ring {
		b := l.ring[(l.start+i)%len(l.ring)]
		if b.Seq >= seq {
			dst = append(dst, b)
		}
	}
	return dst
}

// appendBlockTokens appends the tokens of block k of r's prompt and
// output to dst. Only valid while r keeps its prompt tokens (KV events
// on); output tokens are recomputed from the request's seed.
func (r *request) appendBlockTokens(dst []uint32, k, blockSize int) []uint32 {
	for p := k * blockSize; p < (k+1)*blockSize; p++ {
		if p < len(r.tokens) {
			dst = append(dst, r.tokens[p])
		} else {
			dst = append(dst, outputToken(r.genSeed, p-r.numPrompt, r.leadSpace))
		}
	}
	return dst
}

// publishLocked publishes the scheduler's pending KV events, if the engine
// has a KV event log, and wakes the stream handlers.
func (e *Engine) publishLocked() {
	l := e.sched.events
	if l == nil {
		return
	}
	l.removed(e.sched.pool.removed)
	e.sched.pool.removed = e.sched.pool.removed[:0]
	if l.publish(time.Now()) {
		e.broadcastLocked()
	}
}

// handleKVEvents streams the KV event batches numbered from ?start=N on
// (default: the next one), one JSON object per line, until the client
// goes away or the engine closes. 404 if the engine publishes no events
// (Config.KVEvents off), as vLLM without --kv-events-config has no
// publisher.
func (e *Engine) handleKVEvents(w http.ResponseWriter, r *http.Request) {
	if e.sched.events == nil {
		http.NotFound(w, r)
		return
	}
	e.mu.Lock()
	next := e.sched.events.next
	e.mu.Unlock()
	if s := r.URL.Query().Get("start"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			http.Error(w, "start: "+err.Error(), http.StatusBadRequest)
			return
		}
		next = n
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	var batches []kvEventBatch
	for {
		e.mu.Lock()
		batches = e.sched.events.since(batches[:0], next)
		changed := e.changedLocked()
		closed := e.closed
		e.mu.Unlock()
		for _, b := range batches {
			if enc.Encode(b) != nil {
				return
			}
			next = b.Seq + 1
		}
		if len(batches) > 0 {
			if bw.Flush() != nil || rc.Flush() != nil {
				return
			}
		}
		if closed {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-e.quit:
			return
		}
	}
}
