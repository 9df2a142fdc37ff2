package caddymodule

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// DefaultForgetAfter is how long an upstream may be absent from every
// pool before the index forgets it: long enough that a DNS answer that
// briefly drops a replica, or a reload in progress, does not cost its
// learned prefixes; short enough that a replica replaced by a new one at
// the same address does not keep attracting requests for long.
const DefaultForgetAfter = caddy.Duration(time.Minute)

// states holds the learned indexes across config reloads, as Caddy's own
// hosts and caddy-ratelimit's zones do: a config that keeps an index's
// shape (chunk size and bound) picks up what the previous config learned,
// because the upstreams' KV caches did not forget it either.
var states = caddy.NewUsagePool()

// sharedState is what outlives one config: the index, and the janitor that
// forgets upstreams that left every pool.
type sharedState struct {
	key   string
	index *prefixindex.Index
	// inflight is the byte bound's load, per upstream of index;
	// uncached the part of it the upstreams were not believed to hold,
	// and prefill their estimated prefill queues.
	inflight inflightBytes
	uncached inflightBytes
	prefill  prefillQueues
	stop     chan struct{}
	done     chan struct{}

	mu     sync.Mutex
	absent map[string]int // consecutive sweeps an interned upstream was in no pool
}

// Destruct stops the janitor; the index is garbage once no config refers
// to it.
func (st *sharedState) Destruct() error {
	close(st.stop)
	<-st.done
	return nil
}

// loadState returns the index for this shape, creating it if no running
// config has one. The janitor of a new index sweeps every forgetAfter/2,
// so an upstream absent from two sweeps in a row is forgotten.
func loadState(chunkSize, maxEntries int, forgetAfter time.Duration) (*sharedState, error) {
	key := fmt.Sprintf("prefix_cache/chunk_size=%d/max_entries=%d", chunkSize, maxEntries)
	v, _, err := states.LoadOrNew(key, func() (caddy.Destructor, error) {
		ix, err := prefixindex.New(prefixindex.Config{MaxEntries: maxEntries})
		if err != nil {
			return nil, fmt.Errorf("creating prefix index: %w", err)
		}
		st := &sharedState{
			key:    key,
			index:  ix,
			stop:   make(chan struct{}),
			done:   make(chan struct{}),
			absent: map[string]int{},
		}
		go st.janitor(forgetAfter / 2)
		return st, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*sharedState), nil
}

// janitor sweeps every interval until the state is destroyed.
func (st *sharedState) janitor(interval time.Duration) {
	defer close(st.done)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-st.stop:
			return
		case <-ticker.C:
			st.sweep()
		}
	}
}

// sweep forgets the upstreams that were in no live instance's pool at
// this sweep and the one before. It forgets nothing while some instance of
// this index has not routed a request yet, since its pool is unknown (just
// after a reload, say).
func (st *sharedState) sweep() {
	present, known := st.pools()
	if !known {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, name := range st.index.Names() {
		if present[name] {
			delete(st.absent, name)
			continue
		}
		st.absent[name]++
		if st.absent[name] >= 2 {
			st.index.Forget(name)
			delete(st.absent, name)
			eachInstance(func(s *PrefixCacheSelection) {
				if s.state == st {
					s.upstreams.invalidate()
				}
			})
		}
	}
}

// pools returns the Dials in the last pool of every live instance that
// uses this state, and whether every such instance has seen a pool.
func (st *sharedState) pools() (map[string]bool, bool) {
	present := map[string]bool{}
	known := true
	eachInstance(func(s *PrefixCacheSelection) {
		if s.state != st {
			return
		}
		pool := s.lastPool.Load()
		if pool == nil {
			known = false
			return
		}
		for _, u := range *pool {
			present[u.Dial] = true
		}
	})
	return present, known
}

// instances are the provisioned policies of the running configs, for the
// janitor, the metrics and the admin API.
var instances struct {
	sync.Mutex
	list []*PrefixCacheSelection
}

func addInstance(s *PrefixCacheSelection) {
	instances.Lock()
	defer instances.Unlock()
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

// notePool remembers pool as the instance's current upstreams. A static
// pool is the same slice on every request, so this stores once per config;
// a dynamic source's pool is stored when its slice changes.
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
