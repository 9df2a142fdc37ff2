package caddymodule

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// released waits until tab holds no bytes at id: a charge is given back by
// a context.AfterFunc callback, which runs on a goroutine of its own once
// the context is done. It fails the test after a deadline.
func released(t *testing.T, tab *inflightBytes, id uint16) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for tab.total[id].Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("upstream %d still holds %d bytes after its requests ended", id, tab.total[id].Load())
		}
		runtime.Gosched()
	}
}

func TestChargeMovesAndReleases(t *testing.T) {
	tab := new(inflightBytes)
	ctx, cancel := context.WithCancel(context.Background())
	var c charge

	c.move(ctx, tab, 1, footprint{size: 1000})
	if got := tab.load(1); got != 1000 {
		t.Fatalf("after the first attempt upstream 1 holds %d bytes, want 1000", got)
	}
	// A retry moves the whole charge to the upstream it chose.
	c.move(ctx, tab, 2, footprint{size: 1000})
	if a, b := tab.load(1), tab.load(2); a != 0 || b != 1000 {
		t.Fatalf("after a retry upstreams 1 and 2 hold %d and %d bytes, want 0 and 1000", a, b)
	}
	cancel()
	released(t, tab, 2)
	if got := tab.load(1); got != 0 {
		t.Fatalf("after the request ended upstream 1 holds %d bytes", got)
	}
	// An attempt after the end (the client went away mid-retry) charges
	// nothing that would never be released.
	c.move(ctx, tab, 3, footprint{size: 1000})
	if got := tab.load(3); got != 0 {
		t.Fatalf("a move after the end charged %d bytes", got)
	}
}

// A request whose context is already done when it is charged (the client
// left during the body read) gives its bytes back too.
func TestChargeAfterContextDone(t *testing.T) {
	tab := new(inflightBytes)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var c charge
	c.move(ctx, tab, 4, footprint{size: 500})
	released(t, tab, 4)
}

func TestChargeManyRequests(t *testing.T) {
	tab := new(inflightBytes)
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, 64)
	for i := range cancels {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Go(func() {
			var c charge
			c.move(ctx, tab, 7, footprint{size: int64(i + 1)})
		})
	}
	wg.Wait()
	if got, want := tab.load(7), int64(64*65/2); got != want {
		t.Fatalf("64 requests hold %d bytes, want %d", got, want)
	}
	for _, cancel := range cancels {
		wg.Go(cancel)
	}
	wg.Wait()
	released(t, tab, 7)
}

// A prefix shared by requests in flight at one upstream counts once there,
// in whole segments; at another upstream it counts again; and the bytes
// come back whatever order the requests end in.
func TestFootprintSharedPrefixCountsOnce(t *testing.T) {
	const chunk = 256 // 4 chunks to a 1 KiB segment
	chain := func(prefix []prefixindex.Hash, n int, salt uint64) []prefixindex.Hash {
		h := slices.Clone(prefix)
		for len(h) < n {
			h = append(h, prefixindex.Hash(salt<<32|uint64(len(h)+1)))
		}
		return h
	}
	a := chain(nil, 40, 1)    // 10 segments
	b := chain(a[:26], 33, 2) // shares 26 chunks with a: 6 whole segments
	fa := newFootprint(a, chunk, 40*chunk+100)
	fb := newFootprint(b, chunk, 33*chunk+7)
	tab := new(inflightBytes)

	if got := tab.add(1, fa); got != fa.size {
		t.Fatalf("the first request added %d bytes, want its size %d", got, fa.size)
	}
	if got, want := tab.add(1, fb), fb.size-6*1024; got != want {
		t.Fatalf("a request sharing 6 segments added %d bytes at the same upstream, want %d", got, want)
	}
	if got := tab.add(2, fb); got != fb.size {
		t.Fatalf("at another upstream it added %d bytes, want its size %d", got, fb.size)
	}
	if got, want := tab.remove(1, fa), fa.size-6*1024; got != want {
		t.Fatalf("the first request, ending first, gave back %d bytes, want %d (the shared segments stay with b)", got, want)
	}
	if got := tab.remove(1, fb); got != fb.size {
		t.Fatalf("the last request at the upstream gave back %d bytes, want %d", got, fb.size)
	}
	tab.remove(2, fb)
	for _, id := range []prefixindex.ID{1, 2} {
		if got := tab.load(id); got != 0 {
			t.Errorf("upstream %d holds %d bytes after every request ended", id, got)
		}
	}
	for i := range tab.shards {
		if n := len(tab.shards[i].n); n != 0 {
			t.Errorf("shard %d still counts %d segments", i, n)
		}
	}
}

// Against a reference that recounts from scratch: an upstream holds the
// private bytes of each request in flight plus each distinct segment once,
// after any sequence of adds and removes, concurrent or not.
func TestFootprintMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	const chunk = 128 // 8 chunks to a segment
	// A tree of prompts: each extends a random earlier one.
	prompts := [][]prefixindex.Hash{nil}
	for i := range 60 {
		parent := prompts[rng.IntN(len(prompts))]
		n := len(parent) + rng.IntN(30)
		h := slices.Clone(parent[:rng.IntN(len(parent)+1)])
		for len(h) < n {
			h = append(h, prefixindex.Hash(uint64(i+1)<<32|uint64(len(h))))
		}
		prompts = append(prompts, h)
	}
	type live struct {
		id prefixindex.ID
		f  footprint
	}
	segBytes := newFootprint(nil, chunk, 0).segBytes
	reference := func(in []live, id prefixindex.ID) int64 {
		segs := map[prefixindex.Hash]bool{}
		var total int64
		for _, l := range in {
			if l.id != id {
				continue
			}
			total += l.f.size
			for i := l.f.stride - 1; i < len(l.f.hashes); i += l.f.stride {
				total -= l.f.segBytes
				segs[l.f.hashes[i]] = true
			}
		}
		return total + int64(len(segs))*segBytes
	}
	tab := new(inflightBytes)
	var in []live
	for step := range 2000 {
		if len(in) > 0 && rng.IntN(2) == 0 {
			k := rng.IntN(len(in))
			tab.remove(in[k].id, in[k].f)
			in = slices.Delete(in, k, k+1)
		} else {
			h := prompts[rng.IntN(len(prompts))]
			l := live{prefixindex.ID(1 + rng.IntN(3)), newFootprint(h, chunk, int64(len(h)*chunk+rng.IntN(chunk)))}
			tab.add(l.id, l.f)
			in = append(in, l)
		}
		for id := prefixindex.ID(1); id <= 3; id++ {
			if got, want := tab.load(id), reference(in, id); got != want {
				t.Fatalf("step %d: upstream %d holds %d bytes, the reference %d", step, id, got, want)
			}
		}
	}
}

// Requests sharing a prefix, charged and released concurrently at one
// upstream, leave nothing behind.
func TestFootprintConcurrent(t *testing.T) {
	shared := make([]prefixindex.Hash, 64)
	for i := range shared {
		shared[i] = prefixindex.Hash(i + 1)
	}
	tab := new(inflightBytes)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				h := append(slices.Clone(shared[:16+i%48]), prefixindex.Hash(uint64(g+1)<<40|uint64(i)))
				f := newFootprint(h, 256, int64(len(h)*256))
				tab.add(5, f)
				tab.remove(5, f)
			}
		})
	}
	wg.Wait()
	if got := tab.load(5); got != 0 {
		t.Errorf("upstream holds %d bytes after every request ended", got)
	}
	for i := range tab.shards {
		if n := len(tab.shards[i].n); n != 0 {
			t.Errorf("shard %d still counts %d segments", i, n)
		}
	}
}
