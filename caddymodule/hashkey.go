package caddymodule

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"

	"github.com/caddyserver/caddy/v2"
)

// hashKeys are what hash_key keys: the chain's seed and its published
// links (prefixindex.KeyedSeed, Chunker.Key), and the tenant scopes
// (tenantKey). Each is 64 bits of SHA-256 of the key, so that none of
// them gives away another or the key.
type hashKeys struct {
	seed, chain, tenant uint64
	// auth keys the tag every sync message carries (syncAuth); nil
	// without hash_key.
	auth []byte
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
	auth := sha256.Sum256([]byte("caddy-prefixcache sync tag\x00" + secret))
	return hashKeys{
		seed:   binary.LittleEndian.Uint64(sum[0:8]),
		chain:  binary.LittleEndian.Uint64(sum[8:16]),
		tenant: binary.LittleEndian.Uint64(sum[16:24]) | 1, // never 0: keyed is never unkeyed
		auth:   auth[:],
	}, nil
}

// With hash_key, every message an edge publishes ends in a tag, the first
// tagSize bytes of HMAC-SHA256 of the message under a key derived from
// hash_key, and a message whose tag does not verify is dropped (counted
// as "unauthenticated") before it is decoded: a publisher without the key
// can make up neither placements nor load reports. Edges of a keyed tier
// all carry the key, so they all tag and verify alike.

// tagSize is the bytes of the tag: 128 bits.
const tagSize = 16

// syncAuth tags and verifies messages.
type syncAuth struct {
	macs sync.Pool // of hash.Hash (HMAC-SHA256 under the key), for publishers
	recv hash.Hash // the receiving goroutine's own
	sum  []byte    // recv's scratch
}

func newSyncAuth(key []byte) *syncAuth {
	a := &syncAuth{recv: hmac.New(sha256.New, key)}
	a.macs.New = func() any { return hmac.New(sha256.New, key) }
	return a
}

// seal appends msg's tag to msg. It allocates nothing once msg has room
// for 32 bytes more.
func (a *syncAuth) seal(msg []byte) []byte {
	mac := a.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write(msg)
	n := len(msg)
	msg = mac.Sum(msg)
	a.macs.Put(mac)
	return msg[:n+tagSize]
}

// open returns msg without its tag, and whether the tag verified. It runs
// on the receiving goroutine only.
func (a *syncAuth) open(msg []byte) ([]byte, bool) {
	if len(msg) < tagSize {
		return nil, false
	}
	body, tag := msg[:len(msg)-tagSize], msg[len(msg)-tagSize:]
	a.recv.Reset()
	a.recv.Write(body)
	a.sum = a.recv.Sum(a.sum[:0])
	return body, hmac.Equal(a.sum[:tagSize], tag)
}
