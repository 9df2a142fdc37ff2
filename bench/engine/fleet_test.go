package engine

import (
	"net/http"
	"runtime"
	"testing"
)

func TestFleet(t *testing.T) {
	f, err := StartFleet(3, fastConfig())
	if err != nil {
		t.Fatal(err)
	}
	addrs := f.Addrs()
	if len(addrs) != 3 || len(f.Engines()) != 3 || addrs[0] == addrs[1] {
		t.Fatalf("Addrs() = %v, %d engines", addrs, len(f.Engines()))
	}
	te := &testEngine{Engine: f.Engines()[1], url: "http://" + addrs[1]}
	body := map[string]any{"prompt": tokenIDs(1, 40), "max_tokens": 1}
	doJSON(t, te, "/v1/completions", body)
	if got := doJSON(t, te, "/v1/completions", body).Usage.cached(); got != 32 {
		t.Errorf("repeat on engine 1: cached %d, want 32", got)
	}
	stats := f.Stats()
	if stats[0].Requests != 0 || stats[1].Requests != 2 || stats[2].Requests != 0 {
		t.Errorf("requests per engine = %d %d %d, want 0 2 0", stats[0].Requests, stats[1].Requests, stats[2].Requests)
	}

	if _, err := StartFleetAt([]string{"127.0.0.1:0", addrs[0]}, fastConfig()); err == nil {
		t.Errorf("StartFleetAt on a busy address succeeded")
	}
	if _, err := StartFleet(0, fastConfig()); err == nil {
		t.Errorf("StartFleet(0) succeeded")
	}

	f.Close()
	for i, e := range f.Engines() {
		select {
		case <-e.done:
		default:
			t.Errorf("engine %d: step loop still running after Fleet.Close", i)
		}
	}
	client := &http.Client{Transport: &http.Transport{}}
	if resp, err := client.Get("http://" + addrs[0] + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("GET /health after Close = %d, want a connection error", resp.StatusCode)
	}
}

// TestFleetMemory measures 8 engines with 100k-token caches, every block
// holding a cached prefix.
func TestFleetMemory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVBlocks = 100_000 / cfg.BlockSize
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	engines := make([]*Engine, 8)
	for i := range engines {
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		e.mu.Lock()
		hashes := make([]uint64, cfg.KVBlocks)
		for j := range hashes {
			hashes[j] = mix64(uint64(i<<32 | j))
		}
		e.sched.pool.release(fill(t, e.sched.pool, hashes))
		e.mu.Unlock()
		engines[i] = e
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perEngine := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(len(engines))
	t.Logf("%d-block engine with a full cache: %d KiB (%d bytes per block)", cfg.KVBlocks, perEngine>>10, perEngine/int64(cfg.KVBlocks))
	if perEngine > 1<<20 {
		t.Errorf("an engine with %d cached blocks uses %d bytes, want under 1 MiB", cfg.KVBlocks, perEngine)
	}
	for _, e := range engines {
		if s := e.Stats(); s.KVBlocksCached != cfg.KVBlocks {
			t.Errorf("KVBlocksCached = %d, want %d", s.KVBlocksCached, cfg.KVBlocks)
		}
	}
}
