// Package prefixcache plugs the prefix_cache load-balancing policy into
// Caddy. Build it in with xcaddy:
//
//	xcaddy build --with github.com/prefixcache/caddy-prefixcache
//
// and use it in a reverse_proxy block:
//
//	reverse_proxy engine-1:8000 engine-2:8000 {
//		lb_policy prefix_cache
//	}
//
// The module itself is caddymodule.PrefixCacheSelection.
package prefixcache

import (
	// Registers http.reverse_proxy.selection_policies.prefix_cache, its
	// admin API, the prefix_cache_model matcher and the prefix_cache_usage
	// handler.
	_ "github.com/prefixcache/caddy-prefixcache/caddymodule"
	// Registers http.prefix_cache.sync.redis, placements shared over Redis.
	_ "github.com/prefixcache/caddy-prefixcache/edgesync/redis"
)
