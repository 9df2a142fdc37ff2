package prefixindex

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Index defaults and limits.
const (
	// DefaultMaxEntries bounds the entries of an index. A replica's KV cache
	// of ~500k tokens holds ~2 MB of text, ~8k chunks of 256 bytes, so 1M
	// entries cover ~128 such replicas, or fewer replicas with hot prefixes
	// replicated on several of them (one entry holds up to MaxOwners owners).
	// At ~40 bytes per entry that is ~40 MiB when full.
	DefaultMaxEntries = 1 << 20

	// DefaultShards is the number of independently locked shards. A request
	// takes one lock per shard its chunks fall in, at most min(chunks,
	// shards), and holds it for its chunks in that shard only, so more shards
	// mean less waiting but more locks per request. 16 keeps a 128-chunk
	// request at 16 lock operations, against 128 with a lock per chunk (see
	// BenchmarkLocking), and keeps contention low on the core counts a
	// reverse proxy runs on: two requests collide only when they touch the
	// same shard at the same moment, for the ~1/16 of their chunks it holds.
	DefaultShards = 16

	// MaxShards is the most shards an index can have.
	MaxShards = 1 << 16

	// MaxOwners is the most owners one entry remembers. A prefix hot enough
	// to live on more than four replicas is warm nearly everywhere it can be
	// sent, so a fifth owner evicts the least recent one. Four 16-bit IDs fill
	// exactly one 8-byte word, which keeps an entry at 24 bytes.
	MaxOwners = 4

	// MaxIDs is the most upstreams interned at once. IDs are 1..MaxIDs; the
	// zero ID names no upstream.
	MaxIDs = 1<<16 - 1

	// maxShardEntries bounds one shard so entry indexes fit in 31 bits (the
	// 32nd of a link is the probation flag) and the slot table fits in 2^32
	// slots.
	maxShardEntries = 1 << 30

	// DefaultProbation is the default Config.Probation: a quarter of each
	// shard is where records not yet confirmed live, and the most of the
	// index that traffic which is never confirmed (requests the engines
	// reject, a flood of unique prompts that fail) can churn. It must hold
	// the prompts in flight between their selection and their answer: a
	// quarter of the default index is 262,144 chunks, 64 MiB of routing
	// text, a thousand 64 KiB prompts at once.
	DefaultProbation = 0.25

	// nameOverhead estimates the bytes one interned name costs beyond its
	// text: its string header and ID in the name map (with the map's load
	// factor and per-group control bytes), and its slot in Index.names.
	nameOverhead = 64
)

// ID is an interned upstream: a small number standing for its name (Caddy's
// Dial string) in index entries. Intern assigns IDs 1..MaxIDs; the zero ID
// names no upstream and never owns anything.
type ID uint16

// Scope is the part of an index that one tenant's entries live in: a run of
// consecutive shards (wrapping around), so that one tenant's traffic can
// evict no more than that share of the index, however much of it there is.
// The zero Scope is the whole index. Scopes are local to one Index: every
// lookup, record and confirmation of a tenant's hashes must use the Scope
// that Index.Scope gives for its key.
type Scope struct {
	first, n uint32 // n == 0: every shard
}

// Config bounds an Index.
type Config struct {
	// MaxEntries bounds the entries (chunk hashes) held across all shards.
	// 0 means DefaultMaxEntries.
	MaxEntries int
	// Shards is the number of independently locked shards, a power of two.
	// 0 means DefaultShards. An index with fewer MaxEntries than Shards uses
	// as many shards as the largest power of two <= MaxEntries.
	Shards int
	// Probation is the share of each shard, above 0 and at most 1, kept for
	// entries that were recorded but not confirmed (see Record and
	// Confirm); the rest holds confirmed entries. 0 means
	// DefaultProbation; 1 makes the index a plain LRU that Confirm only
	// refreshes.
	Probation float64
}

// Stats describes an Index at one moment.
type Stats struct {
	// Entries is the number of chunk hashes held.
	Entries int
	// Capacity is the most entries the index holds (Config.MaxEntries).
	Capacity int
	// Bytes is the memory held by the index: its arrays, its shards and the
	// interned names. It is at most the bound in the package documentation.
	Bytes int64
	// Evictions counts the entries evicted, least recently used first, to
	// stay within Capacity since the index was created.
	Evictions uint64
	// Upstreams is the number of interned upstream names.
	Upstreams int
}

// Index is a bounded map from chunk hash to the upstreams believed to hold
// that prefix. It is safe for concurrent use. Depths and Record are the hot
// path: they never allocate in steady state and never block on anything but
// the shard locks they take, one per shard touched. Intern is lock-free for
// known names. Forget and Flush are the slow path.
type Index struct {
	shards    []shard
	shardMask uint64
	secret    uint64
	capacity  int
	pool      sync.Pool // *scratch

	// live has bit id set while id is interned. Record checks it under the
	// shard lock, so a Forget that clears it before sweeping a shard
	// cannot be undone by a Record that races with the sweep.
	live [(MaxIDs + 1 + 31) / 32]atomic.Uint32

	ids atomic.Pointer[map[string]ID] // read-only once published

	// caps holds the upstreams' capacities and clocks (capacity.go); nil
	// until TrackCapacities, or a first SetCapacity.
	caps atomic.Pointer[capacities]

	mu        sync.Mutex                     // guards the fields below and writers of ids
	used      [(MaxIDs + 1 + 31) / 32]uint32 // bit id set while id is interned or being forgotten
	nUsed     int
	cursor    int // where the search for a free ID starts
	nameBytes int64
	maxIDs    int // MaxIDs; tests lower it
}

// scratch is one request's working memory, pooled per Index.
type scratch struct {
	m      []uint64                       // mixed hash per chunk
	order  []uint32                       // chunk positions, grouped by shard
	end    []uint32                       // end[s]: end of shard s's group in order
	owners []uint64                       // owner list per chunk (Depths)
	stamps [][MaxOwners]uint32            // their stamps, with capacities (Depths)
	want   [(MaxIDs + 1 + 63) / 64]uint64 // ids still without a depth (Depths); all zero between uses
}

// maxPooledChunks keeps requests with absurdly many chunks from pinning large
// scratch buffers in the pool.
const maxPooledChunks = 1 << 16

// New returns an empty index bounded by cfg. Memory is allocated lazily as
// entries arrive, never beyond the bound in the package documentation.
func New(cfg Config) (*Index, error) {
	maxEntries, shards, probation := cfg.MaxEntries, cfg.Shards, cfg.Probation
	if maxEntries == 0 {
		maxEntries = DefaultMaxEntries
	}
	if shards == 0 {
		shards = DefaultShards
	}
	if probation == 0 {
		probation = DefaultProbation
	}
	if !(probation > 0 && probation <= 1) { // also rejects NaN
		return nil, fmt.Errorf("Probation must be above 0 and at most 1, got %v", cfg.Probation)
	}
	if maxEntries < 0 {
		return nil, fmt.Errorf("MaxEntries must not be negative, got %d", maxEntries)
	}
	if shards < 0 || shards > MaxShards || shards&(shards-1) != 0 {
		return nil, fmt.Errorf("Shards must be a power of two between 1 and %d, got %d", MaxShards, shards)
	}
	for shards > maxEntries {
		shards /= 2
	}
	if maxEntries/shards >= maxShardEntries {
		return nil, fmt.Errorf("MaxEntries must be below %d for %d shards, got %d", shards*maxShardEntries, shards, maxEntries)
	}
	ix := &Index{
		shards:    make([]shard, shards),
		shardMask: uint64(shards - 1),
		secret:    rand.Uint64(),
		capacity:  maxEntries,
		cursor:    1,
		maxIDs:    MaxIDs,
	}
	ix.pool.New = func() any { return new(scratch) }
	for i := range ix.shards {
		limit := maxEntries / shards
		if i < maxEntries%shards {
			limit++
		}
		// At least one probation slot, so that a full shard always has
		// an unconfirmed entry to evict before any confirmed one.
		reserve := max(1, int(math.Ceil(probation*float64(limit))))
		ix.shards[i].init(limit, max(0, limit-reserve), ix.secret)
	}
	ids := map[string]ID{}
	ix.ids.Store(&ids)
	return ix, nil
}

// Scope returns the scope of the tenant whose key is key (any well-mixed
// 64-bit value; 0 names no tenant and gets the whole index) when one
// tenant may hold share of the index: ceil(share x shards) shards, at
// least one, chosen from key and the index's secret, so that a client
// cannot pick a tenant value that lands on another tenant's shards. A
// share of 1 or more (or NaN) is the whole index.
func (ix *Index) Scope(key uint64, share float64) Scope {
	shards := len(ix.shards)
	if key == 0 || !(share < 1) {
		return Scope{}
	}
	n := min(max(1, int(math.Ceil(share*float64(shards)))), shards)
	if n == shards {
		return Scope{}
	}
	return Scope{first: uint32(mix(key, ix.secret) & ix.shardMask), n: uint32(n)}
}

// Share returns the share of the index's entries that sc spans.
func (ix *Index) Share(sc Scope) float64 {
	if sc.n == 0 {
		return 1
	}
	return float64(sc.n) / float64(len(ix.shards))
}

// ID returns the ID of the upstream name and whether it is interned,
// without interning it.
func (ix *Index) ID(name string) (ID, bool) {
	id, ok := (*ix.ids.Load())[name]
	return id, ok
}

// Intern returns the ID of the upstream name, assigning one the first time.
// The ID stays the same until Forget(name). A known name costs a map lookup
// and no lock or allocation. Intern returns an error when all MaxIDs IDs are
// in use.
func (ix *Index) Intern(name string) (ID, error) {
	if id, ok := (*ix.ids.Load())[name]; ok {
		return id, nil
	}
	var id [1]ID
	_, err := ix.InternAll([]string{name}, id[:0])
	return id[0], err
}

// InternAll interns every name of names, as Intern does, into dst (which
// it grows to len(names)), and returns dst. It clones the name table once
// for the whole batch where Intern clones it for each new name, so
// interning n new names costs O(n + names known) instead of O(n^2). A name
// that cannot be interned (all MaxIDs IDs in use) gets ID 0, and the first
// such error is returned after the other names are interned.
func (ix *Index) InternAll(names []string, dst []ID) ([]ID, error) {
	dst = slices.Grow(dst[:0], len(names))[:len(names)]
	known := *ix.ids.Load()
	missing := false
	for i, name := range names {
		id, ok := known[name]
		dst[i] = id
		missing = missing || !ok
	}
	if !missing {
		return dst, nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old := *ix.ids.Load()
	var ids map[string]ID // the clone, made at the first new name
	var firstErr error
	for i, name := range names {
		if id, ok := old[name]; ok {
			dst[i] = id
			continue
		}
		if id, ok := ids[name]; ok { // a duplicate within names
			dst[i] = id
			continue
		}
		if ix.nUsed >= ix.maxIDs {
			dst[i] = 0
			if firstErr == nil {
				firstErr = fmt.Errorf("interning upstream %q: all %d IDs in use", name, ix.maxIDs)
			}
			continue
		}
		if ids == nil {
			ids = maps.Clone(old)
		}
		id := ix.nextFree()
		ix.used[id/32] |= 1 << (id % 32)
		ix.nUsed++
		ids[name] = id
		ix.nameBytes += int64(len(name)) + nameOverhead
		dst[i] = id
	}
	if ids != nil {
		ix.ids.Store(&ids)
		// Live after the name is visible, as Intern does.
		for _, id := range dst {
			if id != 0 {
				ix.live[id/32].Or(1 << (id % 32))
			}
		}
	}
	return dst, firstErr
}

// Forget removes the upstream name from every entry, frees the entries left
// without an owner, and then frees name's ID for reuse. Entries keep their
// other owners and their recency. It sweeps every entry, a batch at a time
// per shard lock, so it is the slow path: call it when an upstream leaves.
// Forgetting an unknown name does nothing.
//
// IDs are assigned round-robin (see nextFree), so a freed ID is reused only
// after every other free ID has been handed out: a request that interned the
// name before Forget and records after it is very unlikely to attribute its
// prefix to a newer upstream.
func (ix *Index) Forget(name string) {
	ix.mu.Lock()
	old := *ix.ids.Load()
	id, ok := old[name]
	if !ok {
		ix.mu.Unlock()
		return
	}
	ids := maps.Clone(old)
	delete(ids, name)
	ix.ids.Store(&ids)
	ix.live[id/32].And(^uint32(1 << (id % 32)))
	ix.mu.Unlock()

	for i := range ix.shards {
		ix.shards[i].forget(uint16(id))
	}

	ix.mu.Lock()
	ix.forgetCapacity(id)
	ix.used[id/32] &^= 1 << (id % 32)
	ix.nUsed--
	ix.nameBytes -= int64(len(name)) + nameOverhead
	ix.mu.Unlock()
}

// nextFree returns the first unused ID at or after the cursor, wrapping
// around, and moves the cursor past it. IDs are thus assigned in a cycle:
// every never-used ID comes before any reuse, and a forgotten ID is reused
// only after the cursor has gone round all the others. ix.mu must be held and
// an ID must be free.
func (ix *Index) nextFree() ID {
	for id := ix.cursor; ; id++ {
		if id > ix.maxIDs {
			id = 1
		}
		if ix.used[id/32]&(1<<(id%32)) == 0 {
			ix.cursor = id + 1
			return ID(id)
		}
	}
}

// isLive reports whether id is interned.
func (ix *Index) isLive(id ID) bool {
	return ix.live[id/32].Load()&(1<<(id%32)) != 0
}

// Depths sets depths[j], for each j < len(ids), to the depth of the
// deepest hash ids[j] owns in scope: k when it owns hashes[k-1] and none
// deeper, 0 when it owns none. Hashes are chained, so owning hashes[k-1]
// means ids[j] was sent the whole prefix through chunk k-1; it need not
// still own the shallower entries themselves. A hot shallow prefix (a
// system prompt every request shares) keeps only its MaxOwners most recent
// owners, and an upstream that dropped off that list still holds its deeper
// conversation. Entries on probation count as much as confirmed ones.
// depths must be at least as long as ids.
//
// Depths does not refresh recency: only Record and Confirm do. Every
// request that is routed is recorded right after, which refreshes exactly
// the entries that mattered, while a lookup that is not followed by a
// Record (the request went elsewhere or failed) should not keep a prefix
// alive.
//
// Depths takes each shard's lock once for all the hashes in that shard,
// then scans the owners from the deepest hash up, stopping once every id
// has its depth.
func (ix *Index) Depths(scope Scope, hashes []Hash, ids []ID, depths []int) {
	depths = depths[:len(ids)]
	clear(depths)
	if len(hashes) == 0 || len(ids) == 0 {
		return
	}

	sc := ix.pool.Get().(*scratch)
	defer ix.release(sc)
	ix.group(sc, scope, hashes)
	sc.owners = slices.Grow(sc.owners[:0], len(hashes))[:len(hashes)]
	caps := ix.caps.Load()
	if caps != nil {
		sc.stamps = slices.Grow(sc.stamps[:0], len(hashes))[:len(hashes)]
	}
	start := uint32(0)
	for g, end := range sc.end {
		if start == end {
			continue
		}
		sh := ix.shardOf(scope, g)
		sh.mu.Lock()
		for _, i := range sc.order[start:end] {
			if caps == nil {
				sc.owners[i] = sh.owners(sc.m[i], uint64(hashes[i]))
				continue
			}
			sc.owners[i], sc.stamps[i] = sh.ownersStamped(sc.m[i], uint64(hashes[i]))
		}
		sh.mu.Unlock()
		start = end
	}

	// want marks the ids still without a depth; the deepest owner list
	// that names one gives it.
	remaining := 0
	for _, id := range ids {
		if id != 0 && sc.want[id/64]&(1<<(id%64)) == 0 {
			sc.want[id/64] |= 1 << (id % 64)
			remaining++
		}
	}
	for k := len(hashes) - 1; k >= 0 && remaining > 0; k-- {
		for o, p := sc.owners[k], 0; o != 0; o, p = o>>16, p+1 {
			id := ID(o)
			if sc.want[id/64]&(1<<(id%64)) == 0 {
				continue
			}
			if caps != nil && caps.evicted(id, sc.stamps[k][p]) {
				continue // its engine has evicted this prefix since
			}
			sc.want[id/64] &^= 1 << (id % 64)
			remaining--
			for j, x := range ids {
				if x == id {
					depths[j] = k + 1
				}
			}
		}
	}
	for _, id := range ids {
		sc.want[id/64] &^= 1 << (id % 64)
	}
}

// Record notes that owner now holds every prefix in hashes, as its most
// recent owner, and makes those entries the most recently used of their
// list, creating the missing ones on probation and evicting least recently
// used probation entries to stay within MaxEntries. Record is what a
// selection knows: the request was sent to owner. Until Confirm says the
// owner answered, its new entries can only displace other unconfirmed
// ones, so traffic that is never confirmed (rejected, failed, hostile)
// cannot evict what confirmed traffic taught.
//
// Within a shard it records the deepest hashes first, so that shallower
// prefixes, which every deeper one needs, are evicted last. Record takes
// each shard's lock once for all the hashes in that shard. Recording for
// an ID that is not interned (0, or forgotten) does nothing.
func (ix *Index) Record(scope Scope, hashes []Hash, owner ID) {
	ix.update(scope, hashes, owner, false)
}

// Confirm notes that owner answered a request for hashes (its engine
// holds the prefix): as Record, but the entries become protected, promoted
// from probation or created, and only protected entries beyond the
// protected share of a shard are demoted back to probation. Confirming
// what was never recorded records it.
func (ix *Index) Confirm(scope Scope, hashes []Hash, owner ID) {
	ix.update(scope, hashes, owner, true)
}

// update records (or, with confirm, confirms) each hash of hashes in
// scope, deepest first within each shard, under one lock per shard.
func (ix *Index) update(scope Scope, hashes []Hash, owner ID, confirm bool) {
	if len(hashes) == 0 || owner == 0 || !ix.isLive(owner) {
		return
	}
	sc := ix.pool.Get().(*scratch)
	ix.group(sc, scope, hashes)
	caps := ix.caps.Load()
	var now, limit uint32
	if caps != nil {
		now, limit = caps.clock[owner].Load(), caps.limit[owner].Load()
	}
	fresh := 0
	start := uint32(0)
	for g, end := range sc.end {
		if start == end {
			continue
		}
		sh := ix.shardOf(scope, g)
		sh.mu.Lock()
		if caps != nil && sh.stamps == nil {
			sh.initStamps()
		}
		sh.capNow, sh.capLimit, sh.capFresh = now, limit, 0
		// Checked under the lock: see Forget.
		if ix.isLive(owner) {
			group := sc.order[start:end]
			for k := len(group) - 1; k >= 0; k-- {
				i := group[k]
				if confirm {
					sh.confirm(sc.m[i], uint64(hashes[i]), uint16(owner))
				} else {
					sh.record(sc.m[i], uint64(hashes[i]), uint16(owner))
				}
			}
		}
		fresh += sh.capFresh
		sh.mu.Unlock()
		start = end
	}
	if caps != nil && fresh > 0 {
		// What was new to the upstream's engine took as many of its
		// blocks, evicting its least recently used once it is full.
		caps.clock[owner].Add(uint32(fresh))
	}
	ix.release(sc)
}

// shardOf returns the shard of group g of scope (see group).
func (ix *Index) shardOf(scope Scope, g int) *shard {
	return &ix.shards[(uint64(scope.first)+uint64(g))&ix.shardMask]
}

// group fills sc.m with the mixed hashes and sc.order with the positions of
// hashes grouped by shard of scope (a counting sort, ascending within a
// shard), and sets sc.end[g] to the end of group g, the hashes of shard
// shardOf(scope, g). The whole index has one group per shard, picked by the
// mixed hash's low bits; a tenant's scope has scope.n, picked by a
// multiply-shift of its low 32 bits.
func (ix *Index) group(sc *scratch, scope Scope, hashes []Hash) {
	n := len(hashes)
	groups := len(ix.shards)
	if scope.n != 0 {
		groups = int(scope.n)
	}
	sc.m = slices.Grow(sc.m[:0], n)[:n]
	sc.order = slices.Grow(sc.order[:0], n)[:n]
	sc.end = slices.Grow(sc.end[:0], groups)[:groups]
	if groups == 1 {
		for i, h := range hashes {
			sc.m[i] = mix(uint64(h), ix.secret)
			sc.order[i] = uint32(i)
		}
		sc.end[0] = uint32(n)
		return
	}
	// end[g] first counts group g-1's hashes, then becomes the start of
	// group g, then, after placement, its end.
	clear(sc.end)
	for i, h := range hashes {
		m := mix(uint64(h), ix.secret)
		sc.m[i] = m
		if g := groupOf(m, scope, ix.shardMask); g+1 < uint64(groups) {
			sc.end[g+1]++
		}
	}
	for g := 1; g < groups; g++ {
		sc.end[g] += sc.end[g-1]
	}
	for i, m := range sc.m {
		g := groupOf(m, scope, ix.shardMask)
		sc.order[sc.end[g]] = uint32(i)
		sc.end[g]++
	}
}

// groupOf is the group of a mixed hash m in scope.
func groupOf(m uint64, scope Scope, mask uint64) uint64 {
	if scope.n == 0 {
		return m & mask
	}
	return uint64(uint32(m)) * uint64(scope.n) >> 32
}

func (ix *Index) release(sc *scratch) {
	if cap(sc.m) > maxPooledChunks {
		return
	}
	ix.pool.Put(sc)
}

// Flush forgets every entry. Interned names keep their IDs. The arrays are
// released, so Stats().Bytes drops back to the empty index's size.
func (ix *Index) Flush() {
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.Lock()
		sh.reset()
		sh.mu.Unlock()
	}
}

// Stats returns the index's size and counters. It takes every shard lock in
// turn, briefly.
func (ix *Index) Stats() Stats {
	st := Stats{Capacity: ix.capacity}
	st.Bytes = int64(unsafe.Sizeof(*ix))
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.Lock()
		st.Entries += sh.n
		st.Evictions += sh.evictions
		st.Bytes += sh.bytes()
		sh.mu.Unlock()
	}
	if ix.caps.Load() != nil {
		st.Bytes += int64(unsafe.Sizeof(capacities{}))
	}
	ix.mu.Lock()
	st.Upstreams = len(*ix.ids.Load())
	st.Bytes += ix.nameBytes
	ix.mu.Unlock()
	return st
}
