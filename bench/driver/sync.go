package driver

import (
	"encoding/json"
	"fmt"

	"github.com/prefixcache/caddy-prefixcache/edgesync/redis"
)

// SyncRedis is Config.Sync's value for edges sharing placements through a
// redis-server that the benchmark starts for each run.
const SyncRedis = "redis"

// ParseSync checks a -sync value: "" (each edge learns alone) or "redis".
func ParseSync(s string) (string, error) {
	switch s {
	case "", "none", "off":
		return "", nil
	case SyncRedis:
		return s, nil
	}
	return "", fmt.Errorf("unknown sync %q (known: redis, or none)", s)
}

// WithSync returns the JSON Caddy config raw with sync set on every
// prefix_cache selection policy, and how many it found:
//
//	"sync": {"transport": "redis", "url": "redis://127.0.0.1:PORT"}
//
// A policy that already has a sync object (given with -custom-policy, to
// try its other options) keeps it, with transport and url filled in where
// it lacks them.
func WithSync(raw []byte, transport, url string) ([]byte, int, error) {
	var cfg any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, 0, fmt.Errorf("decoding config: %w", err)
	}
	n := setSync(cfg, transport, url)
	out, err := json.Marshal(cfg)
	if err != nil {
		return nil, 0, err
	}
	return out, n, nil
}

// setSync sets sync on every prefix_cache policy object under v.
func setSync(v any, transport, url string) int {
	n := 0
	eachPrefixCache(v, func(p map[string]any) {
		n++
		s, _ := p["sync"].(map[string]any)
		if s == nil {
			s = map[string]any{}
			p["sync"] = s
		}
		if _, ok := s["transport"]; !ok {
			s["transport"] = transport
		}
		if _, ok := s["url"]; !ok {
			s["url"] = url
		}
	})
	return n
}

// syncChannel returns the Pub/Sub channel of the first prefix_cache
// policy's sync in the JSON Caddy config raw that names one, or the
// transport's default.
func syncChannel(raw []byte) string {
	channel := ""
	var cfg any
	if json.Unmarshal(raw, &cfg) == nil {
		eachPrefixCache(cfg, func(p map[string]any) {
			if s, ok := p["sync"].(map[string]any); ok && channel == "" {
				channel, _ = s["channel"].(string)
			}
		})
	}
	if channel == "" {
		return redis.DefaultChannel
	}
	return channel
}

// eachPrefixCache calls fn with every prefix_cache policy object under v,
// a decoded JSON config.
func eachPrefixCache(v any, fn func(policy map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		if v["policy"] == "prefix_cache" {
			fn(v)
		}
		for _, c := range v {
			eachPrefixCache(c, fn)
		}
	case []any:
		for _, c := range v {
			eachPrefixCache(c, fn)
		}
	}
}
