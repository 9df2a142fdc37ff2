package caddymodule

import (
	"sync"
	"sync/atomic"
	"time"
)

// The shipped Caddyfiles turn Caddy's passive health checks off: Caddy
// counts every proxied request that ends in an error against its
// upstream, a client's own abandoned upload included, so clients could
// take every engine out. What those checks did for a dead engine before
// the active checks notice it, the policy does for the failures that are
// the upstream's alone: Caddy retries a POST only when the upstream could
// not be dialed (or a response matched lb_retry_match), so a retry says
// that the attempt before it failed at its upstream. That upstream gets
// no new request from the policy for DialFailureHold, unless no other is
// available, or until the policy sees Caddy's active health checks take
// it out (they then bring it back when it answers again). Without it, every conversation of a dead engine would be
// sent there first, and recorded there, until the active checks take it
// out, and the engine would win them back when it returns.

// DialFailureHold is how long the policy keeps new requests off an
// upstream that a request could not reach: two failed active checks at
// the shipped health_interval of 5s.
const DialFailureHold = 10 * time.Second

// dialFailures is when each upstream a request last failed on failed.
type dialFailures struct {
	n  atomic.Int32 // entries in at: the common case, none, takes no lock
	mu sync.Mutex
	at map[string]int64 // Dial -> unix nanoseconds
}

// failed records that a request could not reach the upstream at dial.
func (f *dialFailures) failed(dial string, now int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[string]int64{}
	}
	f.at[dial] = now
	f.n.Store(int32(len(f.at)))
}

// recent returns the upstreams that failed within DialFailureHold of
// now, forgetting the older ones; nil, without a lock, when none did.
func (f *dialFailures) recent(now int64) []string {
	if f.n.Load() == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for dial, at := range f.at {
		if now-at >= int64(DialFailureHold) {
			delete(f.at, dial)
			continue
		}
		out = append(out, dial)
	}
	f.n.Store(int32(len(f.at)))
	return out
}

// forget drops dial's failure, if any: the active health checks have the
// upstream now.
func (f *dialFailures) forget(dial string) {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.at, dial)
	f.n.Store(int32(len(f.at)))
}
