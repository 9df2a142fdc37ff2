package caddymodule

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/prefixcache/caddy-prefixcache/fleet"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// DefaultForgetAfter is how long an upstream may be absent from every
// pool before the index forgets it: long enough that a DNS answer that
// briefly drops a replica, or a reload in progress, does not cost its
// learned prefixes; short enough that a replica replaced by a new one at
// the same address does not keep attracting requests for long.
const DefaultForgetAfter = caddy.Duration(time.Minute)

// MinForgetAfter is the shortest forget_after: the resolution of the
// janitor's clock, which wakes at most every clockTick.
const MinForgetAfter = caddy.Duration(clockTick)

// MaxForgetAfter is the longest forget_after: far beyond any use, and far
// below what the clock's 32-bit ticks hold (13 years).
const MaxForgetAfter = caddy.Duration(365 * 24 * time.Hour)

// clockTick is the resolution of the janitor's clock, in which upstreams'
// last sightings are kept.
const clockTick = 100 * time.Millisecond

// states holds the learned indexes across config reloads, as Caddy's own
// hosts and caddy-ratelimit's zones do: a config that keeps an index's
// shape (chunk size and bound) picks up what the previous config learned,
// because the upstreams' KV caches did not forget it either.
var states = caddy.NewUsagePool()

// evictionsRetired is the evictions of indexes already dropped, so that
// caddy_prefix_cache_index_evictions_total never goes down.
var evictionsRetired atomic.Uint64

// sharedState is what outlives one config: the index, the per-upstream
// load tables, and the janitor that forgets upstreams that left every pool.
type sharedState struct {
	key   string
	index *prefixindex.Index
	// fleet is what this edge knows of the index's upstreams: its
	// bytes and prefill in flight, the other edges' reports (with sync),
	// the engines' scrapes (with engine_metrics) and what their answers
	// said of their caches (with prefix_cache_usage).
	fleet fleet.Fleet
	// reportNow asks the instance that reports the state's load for a
	// report at once (askReport).
	reportNow chan struct{}
	// seen is, per upstream ID, the janitor's clock when the upstream was
	// last in a pool an instance routed from or holds; clock is that
	// clock, in ticks since start.
	seen  [prefixindex.MaxIDs + 1]atomic.Uint32
	clock atomic.Uint32
	start time.Time

	stop chan struct{}
	done chan struct{}
}

// Destruct stops the janitor; the index is garbage once no config refers
// to it.
func (st *sharedState) Destruct() error {
	close(st.stop)
	<-st.done
	stats := st.index.Stats()
	evictionsRetired.Add(stats.Evictions)
	caddy.Log().Named("prefix_cache").Info("index discarded: no config uses its shape any more",
		zap.String("index", st.key), zap.Int("entries", stats.Entries))
	return nil
}

// indexKey names the index of a shape.
func indexKey(chunkSize, maxEntries int) string {
	return fmt.Sprintf("prefix_cache/chunk_size=%d/max_entries=%d", chunkSize, maxEntries)
}

// loadState returns the index for this shape, creating it if no running
// config has one, and whether it existed.
func loadState(chunkSize, maxEntries int) (*sharedState, bool, error) {
	key := indexKey(chunkSize, maxEntries)
	v, loaded, err := states.LoadOrNew(key, func() (caddy.Destructor, error) {
		ix, err := prefixindex.New(prefixindex.Config{MaxEntries: maxEntries})
		if err != nil {
			return nil, fmt.Errorf("creating prefix index: %w", err)
		}
		st := &sharedState{
			key:       key,
			index:     ix,
			start:     time.Now(),
			reportNow: make(chan struct{}, 1),
			stop:      make(chan struct{}),
			done:      make(chan struct{}),
		}
		st.clock.Store(1) // 0 in seen means never
		go st.janitor()
		return st, nil
	})
	if err != nil {
		return nil, false, err
	}
	return v.(*sharedState), loaded, nil
}

// now is the janitor's clock, for marking upstreams seen.
func (st *sharedState) now() uint32 { return st.clock.Load() }

// markSeen records that id is in a pool now.
func (st *sharedState) markSeen(id prefixindex.ID, now uint32) {
	if st.seen[id].Load() != now {
		st.seen[id].Store(now)
	}
}

// janitor forgets upstreams absent from every pool for forget_after, until
// the state is destroyed. It wakes a few times per forget_after of the
// live instances that share the state (re-read at every wake, so a reload
// that changes forget_after takes effect at once).
func (st *sharedState) janitor() {
	defer close(st.done)
	timer := time.NewTimer(clockTick)
	defer timer.Stop()
	for {
		select {
		case <-st.stop:
			return
		case <-timer.C:
		}
		forgetAfter, ok := st.sweep()
		wait := time.Duration(forgetAfter) / 4
		if !ok {
			wait = time.Duration(DefaultForgetAfter) / 4
		}
		timer.Reset(min(max(wait, clockTick), 10*time.Second))
	}
}

// sweep advances the clock, marks as seen every upstream in a live
// instance's pool, and forgets every interned upstream not seen for the
// longest forget_after of the live instances. It returns the shortest
// forget_after, to set the next wake, and false when no live instance
// uses the state.
func (st *sharedState) sweep() (shortest caddy.Duration, ok bool) {
	now := uint32(time.Since(st.start)/clockTick) + 1
	st.clock.Store(now)
	var longest caddy.Duration
	var users []*PrefixCacheSelection
	eachInstance(func(s *PrefixCacheSelection) {
		if s.state != st {
			return
		}
		users = append(users, s)
		longest = max(longest, s.ForgetAfter)
		if !ok || s.ForgetAfter < shortest {
			shortest = s.ForgetAfter
		}
		ok = true
		for _, dial := range s.knownDials() {
			if id, known := st.index.ID(dial); known {
				st.markSeen(id, now)
			}
		}
	})
	if !ok {
		return 0, false
	}
	limit := uint32(time.Duration(longest) / clockTick)
	for _, name := range st.index.Names() {
		id, known := st.index.ID(name)
		if !known {
			continue
		}
		seen := st.seen[id].Load()
		if seen == 0 {
			// Interned since the last sweep by a path that did not
			// mark it: count it as seen now.
			st.markSeen(id, now)
			continue
		}
		if now-seen <= limit {
			continue
		}
		owned := st.index.Owned()[name]
		st.index.Forget(name)
		st.fleet.Forget(id)
		st.seen[id].Store(0)
		for _, s := range users {
			s.upstreams.invalidate()
		}
		caddy.Log().Named("prefix_cache").Info("forgot an upstream absent from every pool",
			zap.String("index", st.key), zap.String("upstream", name),
			zap.Int("entries", owned), zap.Duration("forget_after", time.Duration(longest)))
	}
	return shortest, true
}

// knownDials returns the Dials of the instance's upstreams that the
// janitor can see without a request: its last pool, or, before its first
// request, the static upstreams of its reverse_proxy handler.
func (s *PrefixCacheSelection) knownDials() []string {
	if pool := s.lastPool.Load(); pool != nil {
		dials := make([]string, len(*pool))
		for i, u := range *pool {
			dials[i] = u.Dial
		}
		return dials
	}
	return s.staticDials
}

// instances are the provisioned policies of the running configs, for the
// janitor, the metrics and the admin API, in the order they were
// provisioned. Each has an ID that no other instance of the process ever
// had, so that the admin API's ?instance=N names the same policy while two
// configs overlap during a reload.
var instances struct {
	sync.Mutex
	list   []*PrefixCacheSelection
	lastID uint64
}

func addInstance(s *PrefixCacheSelection) {
	instances.Lock()
	defer instances.Unlock()
	instances.lastID++
	s.id = instances.lastID
	instances.list = append(instances.list, s)
}

func removeInstance(s *PrefixCacheSelection) {
	instances.Lock()
	defer instances.Unlock()
	instances.list = slices.DeleteFunc(instances.list, func(x *PrefixCacheSelection) bool { return x == s })
}

func eachInstance(fn func(*PrefixCacheSelection)) {
	instances.Lock()
	list := slices.Clone(instances.list)
	instances.Unlock()
	for _, s := range list {
		fn(s)
	}
}

// currentPool returns the instance's current upstreams: the last pool
// Select saw or, before the first request, the static upstreams of its
// reverse_proxy handler once its config is running (Caddy provisions
// them after the policy, and the active context is published after
// every module is provisioned). Nil with dynamic upstreams until a
// request, and for a config that is not running.
func (s *PrefixCacheSelection) currentPool() *reverseproxy.UpstreamPool {
	if pool := s.lastPool.Load(); pool != nil {
		return pool
	}
	if s.handler == nil || len(s.staticDials) == 0 || !s.running() {
		return nil
	}
	s.notePool(s.handler.Upstreams)
	return s.lastPool.Load()
}

// running reports whether s's config is the one Caddy runs. Caddy
// publishes the active context after every module of a config is
// provisioned and its apps started, so once this is true the config's
// handlers and routes are written and may be read from any goroutine;
// before (a reload still provisioning) they may not.
func (s *PrefixCacheSelection) running() bool {
	// The http app wraps the config's context in values; its Done
	// channel is the config's.
	active := caddy.ActiveContext()
	return active.Context != nil && s.root != nil && active.Done() == s.root.Done()
}

// notePool remembers pool as the instance's current upstreams. A static
// pool is the same slice on every request, so this stores once per config;
// Caddy's dynamic upstreams build a new slice per request, each stored (one
// small allocation and a pointer store).
func (s *PrefixCacheSelection) notePool(pool reverseproxy.UpstreamPool) {
	if len(pool) == 0 {
		return
	}
	if last := s.lastPool.Load(); last != nil && len(*last) == len(pool) && &(*last)[0] == &pool[0] {
		return
	}
	p := pool // escapes, so only here: once per new pool
	s.lastPool.Store(&p)
}
