// Package prefixindex turns routing text into chained chunk hashes and keeps a
// bounded index from those hashes to the upstreams believed to hold each
// prefix in their KV cache.
//
// # Hashes
//
// A Chunker cuts routing text into fixed-size chunks and hashes them with
// one-shot xxh3 calls, each seeded with the previous hash, so hash i names
// the whole prefix up to chunk i. The chain starts at a Seed of the model,
// the engine's cache_salt and a tenant key, so that requests that must not
// share a cache never share a hash. The scheme is a wire format, pinned by
// a golden test.
//
// # Index
//
// An Index maps a chunk hash to at most MaxOwners upstream IDs, most recent
// first. For a request's hashes, Depths tells each candidate upstream how deep
// a prefix of the request it is believed to hold: the position of the
// deepest hash it owns, which, the hashes being chained, names the whole
// prefix up to there. Record makes the chosen upstream an owner of all of
// them, and Confirm says that the upstream answered. The index is split
// into shards by hash, each with its own lock, its own least-recently-used
// lists and its own share of Config.MaxEntries. A request takes each shard's lock once for all its hashes
// in that shard (they are grouped by shard first, in pooled scratch memory),
// never once per hash.
//
// Only Record and Confirm refresh recency. Within a shard they refresh the
// deepest hashes first, so a prompt's shallow prefix, shared by more
// requests, outlives its tail.
//
// # Damage bounds
//
// Each shard is a segmented LRU: Record creates entries on probation,
// Confirm promotes them to the protected list, which holds at most
// 1 - Config.Probation of the shard. A new entry evicts the least recently
// used probation entry, so records that are never confirmed (requests the
// engines reject, failed ones) churn only the probation share and never
// evict a confirmed entry.
//
// A Scope confines a tenant's entries to a run of ceil(share x shards)
// shards (Index.Scope), so no tenant, however much it sends, holds or
// evicts more than that share of the index.
//
// # Capacities
//
// SetCapacity tells the index how many chunks an upstream's engine holds;
// the index then models that engine as an LRU of that size, fed the
// chunks each Record sends it uncached, and Depths stops counting what it
// has evicted (capacity.go).
//
// # Memory
//
// An entry is 24 bytes (hash, four 16-bit owners, two 32-bit LRU links) in a
// flat array, plus one 8-byte slot in an open-addressed table kept at most 3/4
// full; neither holds pointers, so the garbage collector never scans them.
// Arrays grow by doubling as entries arrive, up to the bound. With
// C = MaxEntries/Shards entries per shard and its slot table of
// S(C) = the least power of two >= 4C/3 slots (< 8C/3 + 1), a shard holds at
// most 24(C+2) bytes of entries (plus under 8 KiB of allocator rounding),
// 8 S(C) bytes of slots and 128 bytes of its own, so:
//
//	Stats().Bytes <= 46*MaxEntries + 8.5 KiB*Shards + 17 KiB + sum over interned names of (len(name) + 64)
//
// With capacities tracked (TrackCapacities, or a first SetCapacity),
// each shard also keeps 16 bytes of stamps per entry, and the index 512
// KiB of clocks and capacities: add 16*MaxEntries (plus the growth rounding of the stamps'
// array) and 512 KiB to the bound.
//
// A full index costs between 35 and 46 bytes per entry depending on where C
// falls between powers of two; the default (1<<20 entries, 16 shards) costs
// 40.1 bytes per entry, 40 MiB in all. (Two entries per shard are the
// sentinels of its two lists.) Stats().Bytes is what the index
// holds; tests check it against the heap. Not counted: the transient scratch
// of requests in flight (20 bytes per hash of the request, pooled) and the
// old array while one doubles.
//
// # Why not golang-lru
//
// hashicorp/golang-lru/v2 keeps each entry as a heap object reached through
// a map of pointers: several times the bytes per entry, an allocation per
// new chunk, and an object per entry for the garbage collector to mark on
// every cycle, where this package's arrays are a few pointer-free objects.
// Its locked caches take a lock per call, that is per chunk.
// BenchmarkVsGolangLRU measures both on the same job; docs/prefix-index.md
// gives the figures.
package prefixindex
