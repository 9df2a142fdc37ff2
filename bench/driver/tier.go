package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// tier is the edge tier of one run: the Caddy instances in front of the
// fleet, all with the same configuration but their listen address, and
// the redis-server they share placements through, if any.
type tier struct {
	// urls are the edges' base URLs; the client sends each request to
	// one of them (see edgeFor).
	urls []string

	// local is set when the one edge is a Caddy in this process; edges
	// are the child processes otherwise.
	local bool
	edges []*Edge

	// redis is the server the edges sync through, and sync its name in
	// the results ("" when no policy of the config syncs).
	redis *Redis
	sync  string

	stopOnce sync.Once
	stopErr  error
}

// startTier starts cfg.Edges edges (at least one) in front of upstreams,
// with policy p, and the redis-server of cfg.Sync when p's config has a
// prefix_cache policy to sync. One edge runs in this process, as the
// benchmark always has, unless cfg.EdgeProcesses; several run as child
// processes (StartEdges).
func startTier(ctx context.Context, cfg Config, upstreams []string, p Policy) (*tier, error) {
	n := max(1, cfg.Edges)
	t := &tier{}
	listens, configs, err := t.configs(ctx, cfg, upstreams, p, n)
	if err != nil {
		t.stop()
		return nil, err
	}
	if n == 1 && !cfg.EdgeProcesses {
		if err := caddy.Load(configs[0], true); err != nil {
			t.stop()
			return nil, fmt.Errorf("loading Caddy config: %w", err)
		}
		t.local = true
	} else {
		// A reserved port is free only until it is closed: an outgoing
		// connection of any process on the machine may take it as its
		// ephemeral port before the edge binds it. Then the tier is
		// started again on other ports.
		for attempt := 1; ; attempt++ {
			t.edges, err = StartEdges(ctx, configs, listens)
			if err == nil {
				break
			}
			if attempt == portAttempts || !strings.Contains(err.Error(), "address already in use") {
				t.stop()
				return nil, fmt.Errorf("starting %d edges: %w", n, err)
			}
			if listens, configs, err = t.configs(ctx, cfg, upstreams, p, n); err != nil {
				t.stop()
				return nil, err
			}
		}
	}
	t.urls = nil
	for _, addr := range listens {
		t.urls = append(t.urls, "http://"+addr)
	}
	if t.redis != nil {
		// Each edge process holds one subscription per channel.
		if err := t.redis.WaitSubscribers(ctx, syncChannel(configs[0]), n, syncConnectTimeout); err != nil {
			t.stop()
			return nil, fmt.Errorf("edges syncing: %w", err)
		}
	}
	return t, nil
}

// reservePorts is ReservePorts; a test replaces it to hand out a taken
// port.
var reservePorts = ReservePorts

// portAttempts is how many times a tier of edge processes is started on
// newly reserved ports when one of them finds its port taken.
const portAttempts = 3

// configs reserves n listen addresses and returns them with the edges'
// configurations, syncing through t's redis-server, which it starts the
// first time it is needed.
func (t *tier) configs(ctx context.Context, cfg Config, upstreams []string, p Policy, n int) ([]string, [][]byte, error) {
	listens, err := reservePorts(n)
	if err != nil {
		return nil, nil, err
	}
	configs := make([][]byte, n)
	for i, addr := range listens {
		configs[i], err = AdaptCaddyfile(cfg.Caddyfile, map[string]string{
			"LISTEN":    addr,
			"UPSTREAMS": strings.Join(upstreams, " "),
		}, p, cfg.Engine.TimeScale)
		if err != nil {
			return nil, nil, err
		}
	}
	if cfg.Sync != SyncRedis {
		return listens, configs, nil
	}
	if t.redis == nil {
		if _, found, err := WithSync(configs[0], SyncRedis, ""); err != nil {
			return nil, nil, err
		} else if found == 0 {
			return listens, configs, nil
		}
		if t.redis, err = StartRedis(ctx); err != nil {
			return nil, nil, err
		}
		t.sync = SyncRedis
	}
	for i := range configs {
		if configs[i], _, err = WithSync(configs[i], SyncRedis, t.redis.URL()); err != nil {
			return nil, nil, err
		}
	}
	return listens, configs, nil
}

// syncConnectTimeout bounds the wait for every edge to subscribe to the
// sync channel; on loopback they do within milliseconds of loading.
const syncConnectTimeout = 30 * time.Second

// stop stops the edges, then the redis-server; it returns their errors,
// an edge that crashed during the run among them. stop is idempotent.
func (t *tier) stop() error {
	t.stopOnce.Do(func() {
		var errs []error
		if t.local {
			errs = append(errs, caddy.Stop())
		}
		errs = append(errs, StopEdges(t.edges))
		if t.redis != nil {
			errs = append(errs, t.redis.Stop())
		}
		t.stopErr = errors.Join(errs...)
	})
	return t.stopErr
}

// edgeFor returns the edge, of n, that turn t of conversation c goes to:
// uniform, and a function of the seed and the request alone, so that a
// replay sends every request to the same edge whatever the timing, and a
// conversation's turns land on different edges, as behind an L4 balancer
// that knows nothing of conversations.
func edgeFor(seed uint64, c, t, n int) int {
	if n <= 1 {
		return 0
	}
	h := mix64(seed ^ mix64(uint64(c)<<32|uint64(uint32(t))))
	return int(h % uint64(n))
}

// mix64 is splitmix64's finaliser.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
