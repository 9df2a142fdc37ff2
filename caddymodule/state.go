package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// states holds the learned indexes across config reloads, as Caddy's own
// hosts and caddy-ratelimit's zones do: a config that keeps an index's
// shape (chunk size and bound) picks up what the previous config learned,
// because the upstreams' KV caches did not forget it either.
var states = caddy.NewUsagePool()

// sharedState is what outlives one config.
type sharedState struct {
	index *prefixindex.Index
}

// Destruct implements caddy.Destructor; the index is garbage once no
// config refers to it.
func (*sharedState) Destruct() error { return nil }

// loadState returns the index for this shape, creating it if no running
// config has one, and the key under which to release it.
func loadState(chunkSize, maxEntries int) (*sharedState, string, error) {
	key := fmt.Sprintf("prefix_cache/chunk_size=%d/max_entries=%d", chunkSize, maxEntries)
	v, _, err := states.LoadOrNew(key, func() (caddy.Destructor, error) {
		ix, err := prefixindex.New(prefixindex.Config{MaxEntries: maxEntries})
		if err != nil {
			return nil, fmt.Errorf("creating prefix index: %w", err)
		}
		return &sharedState{index: ix}, nil
	})
	if err != nil {
		return nil, "", err
	}
	return v.(*sharedState), key, nil
}
