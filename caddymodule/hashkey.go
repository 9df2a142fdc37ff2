package caddymodule

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/caddyserver/caddy/v2"
)

// hashKeys are what hash_key keys: the chain's seed and its published
// links (prefixindex.KeyedSeed, Chunker.Key), and the tenant scopes
// (tenantKey). Each is 64 bits of SHA-256 of the key, so that none of
// them gives away another or the key.
type hashKeys struct {
	seed, chain, tenant uint64
}

// minHashKey is the shortest hash_key accepted: 128 bits of a random
// secret.
const minHashKey = 16

// deriveHashKeys resolves hash_key's global placeholders ({env.*}) and
// derives the keys from it; the zero keys without one. Its errors never
// include the key.
func deriveHashKeys(key string) (hashKeys, error) {
	if key == "" {
		return hashKeys{}, nil
	}
	secret := caddy.NewReplacer().ReplaceAll(key, "")
	if len(secret) < minHashKey {
		return hashKeys{}, fmt.Errorf("hash_key must be at least %d bytes, got %d (an unset environment variable?)", minHashKey, len(secret))
	}
	sum := sha256.Sum256([]byte("caddy-prefixcache hash_key\x00" + secret))
	return hashKeys{
		seed:   binary.LittleEndian.Uint64(sum[0:8]),
		chain:  binary.LittleEndian.Uint64(sum[8:16]),
		tenant: binary.LittleEndian.Uint64(sum[16:24]) | 1, // never 0: keyed is never unkeyed
	}, nil
}
