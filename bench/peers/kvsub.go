package peers

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// kvBatch and kvEvent are a batch of KV cache events as an engine streams
// them on GET /kv_events (bench/engine kvevents.go): vLLM's KVEventBatch
// (vllm/distributed/kv_events.py) with its sequence number, one JSON
// object per line.
type kvBatch struct {
	Seq    uint64    `json:"seq"`
	TS     float64   `json:"ts"`
	Events []kvEvent `json:"events"`
}

type kvEvent struct {
	Type        string   `json:"type"` // BlockStored, BlockRemoved, AllBlocksCleared
	BlockHashes []uint64 `json:"block_hashes"`
	Parent      *uint64  `json:"parent_block_hash"`
	TokenIDs    []uint32 `json:"token_ids"`
	BlockSize   int      `json:"block_size"`
}

// subscribeKVEvents follows dial's KV event stream until ctx is done,
// calling apply with each batch in order, as Dynamo's subscriber forwards
// an engine's ZMQ events to the router: from sequence number 0, and after
// a broken stream from the next number it needs, so nothing is applied
// twice; a batch the engine no longer keeps is a gap, counted by apply's
// caller from the sequence numbers. It gives up on 404 (the engine
// publishes no events), leaving the router with what it has.
func subscribeKVEvents(ctx context.Context, client *http.Client, dial string, apply func(kvBatch)) {
	var next uint64
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		n, notFound := followKVEvents(ctx, client, dial, next, apply)
		if notFound {
			return
		}
		if n > next {
			next, backoff = n, 50*time.Millisecond
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// followKVEvents reads one connection's stream from start and returns the
// sequence number after the last batch applied.
func followKVEvents(ctx context.Context, client *http.Client, dial string, start uint64, apply func(kvBatch)) (next uint64, notFound bool) {
	next = start
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+dial+"/kv_events?start="+strconv.FormatUint(start, 10), nil)
	if err != nil {
		return next, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return next, false
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return next, true
	}
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return next, false
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var b kvBatch
		if json.Unmarshal(sc.Bytes(), &b) != nil {
			return next, false
		}
		if b.Seq < next {
			continue // already applied
		}
		apply(b)
		next = b.Seq + 1
	}
	return next, false
}
