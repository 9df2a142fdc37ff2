package driver

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/prefixcache/caddy-prefixcache/caddymodule"
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
	switch v := v.(type) {
	case map[string]any:
		if v["policy"] == "prefix_cache" {
			n++
			s, _ := v["sync"].(map[string]any)
			if s == nil {
				s = map[string]any{}
				v["sync"] = s
			}
			if _, ok := s["transport"]; !ok {
				s["transport"] = transport
			}
			if _, ok := s["url"]; !ok {
				s["url"] = url
			}
		}
		for _, c := range v {
			n += setSync(c, transport, url)
		}
	case []any:
		for _, c := range v {
			n += setSync(c, transport, url)
		}
	}
	return n
}

// SyncSupported reports whether prefix_cache has a "sync" config field
// (issue 15, being written in parallel). Until it does, a config with
// sync is rejected, and the end-to-end tests that need it skip, saying
// so; they run by themselves once the field lands.
func SyncSupported() bool {
	t := reflect.TypeFor[caddymodule.PrefixCacheSelection]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name == "sync" {
			return true
		}
	}
	return false
}
