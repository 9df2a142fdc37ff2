package peers

import (
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// available returns the indexes of pool's available upstreams.
func available(pool reverseproxy.UpstreamPool) []int {
	idx := make([]int, 0, len(pool))
	for i, u := range pool {
		if u.Available() {
			idx = append(idx, i)
		}
	}
	return idx
}

// leastConn returns the available upstream with the fewest requests in
// flight, a random one among ties, or nil: the peers' fallback for requests
// they cannot read, as least_conn is prefix_cache's.
func leastConn(pool reverseproxy.UpstreamPool, intn func(int) int) *reverseproxy.Upstream {
	var best *reverseproxy.Upstream
	ties := 0
	for _, u := range pool {
		if !u.Available() {
			continue
		}
		switch n := u.NumRequests(); {
		case best == nil || n < best.NumRequests():
			best, ties = u, 1
		case n == best.NumRequests():
			ties++
			if intn(ties) == 0 {
				best = u
			}
		}
	}
	return best
}

// setReason sets {http.reverse_proxy.prefix_cache.reason}, which the
// benchmark's Caddyfile returns in a response header and the driver counts.
func setReason(r *http.Request, reason string) {
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set("http.reverse_proxy.prefix_cache.reason", reason)
	}
}

// interner numbers upstream Dials, so the algorithms work on small ints.
// Not safe for concurrent use: each module guards its own.
type interner struct {
	ids   map[string]int
	names []string
}

// id returns name's number, assigning the next one on first sight.
func (in *interner) id(name string) int {
	if id, ok := in.ids[name]; ok {
		return id
	}
	if in.ids == nil {
		in.ids = make(map[string]int)
	}
	id := len(in.names)
	in.ids[name] = id
	in.names = append(in.names, name)
	return id
}

// defaultIntn is the random source of Select's tie-breaks.
func defaultIntn(n int) int { return rand.IntN(n) }

// floatOr is *v, or def when the config leaves v unset: a knob whose 0
// is a setting of its own (a weight that drops a scorer, a threshold
// that always takes the cache) cannot use 0 for its default.
func floatOr(v *float64, def float64) float64 {
	if v == nil {
		return def
	}
	return *v
}

// scaled returns d x timeScale.
func scaled(d caddy.Duration, timeScale float64) time.Duration {
	return max(time.Millisecond, time.Duration(float64(d)*timeScale))
}
