package prefixindex

import "sync/atomic"

// An engine holds only so much: a vLLM engine with 400,000 tokens of KV
// cache holds about 1.6 MB of routing text, 6,250 chunks of 256 bytes, and
// evicts its least recently used blocks beyond that. The index, whose own
// bound is the whole fleet's and more, would go on believing it holds
// prefixes it evicted long ago. SetCapacity tells the index how many
// chunks one upstream holds, and from then on the index models that
// upstream's cache as an LRU of that size:
//
//   - Each upstream has a clock: the chunks the index believes were new
//     to it, sent to it uncached, so far (each one evicts one of its
//     least recently used chunks once it is full).
//   - Each owner of each entry carries a stamp: its upstream's clock when
//     a request last sent it that prefix (Record or Confirm).
//   - An owner whose stamp is more than the capacity behind its clock was
//     evicted: Depths does not count it, and a Record that sends the
//     prefix there again counts it as new.
//
// Nothing is swept: an evicted owner stays in its entry, unseen, until a
// Record refreshes it, a newer owner pushes it out, or the entry itself is
// evicted. The clocks and stamps exist once TrackCapacities (or a first
// SetCapacity) asks for them, for every upstream, so that Age can tell
// how long ago an upstream with no capacity yet was sent a prefix; until
// then nothing changes and nothing is allocated. The stamps are an array
// beside the entries, 16 bytes per entry (four 32-bit stamps). A clock
// counts 2^32 chunks (a terabyte of text to one upstream) before it
// wraps, far beyond what any entry outlives in the index.

// capacities are the upstreams' clocks and capacities, by ID.
type capacities struct {
	clock [MaxIDs + 1]atomic.Uint32
	limit [MaxIDs + 1]atomic.Uint32 // chunks; 0: no capacity
}

// MaxCapacity is the largest capacity, in chunks, SetCapacity takes: half
// the clock's range, so that ages compare correctly.
const MaxCapacity = 1 << 31

// SetCapacity says that id's engine holds the chunks most recently sent to
// it, chunks of them in all; 0 lifts the bound, and a larger value than
// MaxCapacity is MaxCapacity. It is cheap (two atomic stores), so callers
// may set it at every update of what they know. Capacities are kept until
// Forget.
func (ix *Index) SetCapacity(id ID, chunks int) {
	if id == 0 || chunks < 0 {
		return
	}
	caps := ix.caps.Load()
	if caps == nil {
		if chunks == 0 {
			return
		}
		caps = ix.trackCapacities()
	}
	caps.limit[id].Store(uint32(min(chunks, MaxCapacity)))
}

// TrackCapacities starts the clocks and stamps, if they have not
// started, so that Age answers for every upstream before any has a
// capacity. It costs 512 KiB, and 16 bytes per entry as entries are
// recorded.
func (ix *Index) TrackCapacities() { ix.trackCapacities() }

func (ix *Index) trackCapacities() *capacities {
	if caps := ix.caps.Load(); caps != nil {
		return caps
	}
	ix.caps.CompareAndSwap(nil, new(capacities))
	return ix.caps.Load()
}

// ClearCapacities lifts every upstream's capacity; the clocks keep
// counting, so that a capacity set again later ages the stamps rightly.
func (ix *Index) ClearCapacities() {
	caps := ix.caps.Load()
	if caps == nil {
		return
	}
	for id := range caps.limit {
		caps.limit[id].Store(0)
	}
}

// Capacity returns id's capacity in chunks, 0 when it has none, and how
// many chunks the index believes were new to it since it was interned.
func (ix *Index) Capacity(id ID) (chunks int, sent uint32) {
	caps := ix.caps.Load()
	if caps == nil {
		return 0, 0
	}
	return int(caps.limit[id].Load()), caps.clock[id].Load()
}

// forgetCapacity clears id's capacity and clock, once no entry names it.
func (ix *Index) forgetCapacity(id ID) {
	if caps := ix.caps.Load(); caps != nil {
		caps.limit[id].Store(0)
		caps.clock[id].Store(0)
	}
}

// evicted reports whether an owner stamped st is past its upstream's
// capacity.
func (c *capacities) evicted(id ID, st uint32) bool {
	limit := c.limit[id].Load()
	return limit != 0 && c.clock[id].Load()-st > limit
}

// laneOf returns the lane of id in owner list o, or -1.
func laneOf(o uint64, id uint16) int {
	for p := range MaxOwners {
		if uint16(o>>(16*p)) == id {
			return p
		}
	}
	return -1
}

// pushStamp does to an entry's stamps what pushOwner does to its owners:
// the lane p of the owner pushed (-1 if it had none) is taken out, the
// others move up one, the last falling off, and v goes in front.
func pushStamp(st *[MaxOwners]uint32, p int, v uint32) {
	if p >= 0 {
		removeStamp(st, p)
	}
	copy(st[1:], st[:MaxOwners-1])
	st[0] = v
}

// removeStamp does to an entry's stamps what removeOwner does to its
// owners: lane p is taken out and the later ones move down.
func removeStamp(st *[MaxOwners]uint32, p int) {
	copy(st[p:], st[p+1:])
	st[MaxOwners-1] = 0
}

// initStamps gives s its stamps, one zero array per entry: the owners of
// entries recorded before the clocks started are stamped at their start,
// so they count as evicted once their upstream has been sent its
// capacity's worth since. s.mu must be held.
func (s *shard) initStamps() {
	s.stamps = make([][MaxOwners]uint32, len(s.entries), cap(s.entries))
}

// growStamps keeps the stamps as long as the entries. s.mu must be held.
func (s *shard) growStamps() {
	if s.stamps == nil {
		return
	}
	if cap(s.stamps) < cap(s.entries) {
		grown := make([][MaxOwners]uint32, len(s.stamps), cap(s.entries))
		copy(grown, s.stamps)
		s.stamps = grown
	}
	s.stamps = s.stamps[:len(s.entries)]
}

// Age returns how many chunks have been sent uncached to id since it was
// last sent the prefix h names, by its clock, and whether id owns h and
// the clocks run (TrackCapacities). It takes h's shard lock once.
func (ix *Index) Age(scope Scope, h Hash, id ID) (uint32, bool) {
	caps := ix.caps.Load()
	if caps == nil || id == 0 {
		return 0, false
	}
	m := mix(uint64(h), ix.secret)
	sh := ix.shardOf(scope, int(groupOf(m, scope, ix.shardMask)))
	sh.mu.Lock()
	o, st := sh.ownersStamped(m, uint64(h))
	sh.mu.Unlock()
	p := laneOf(o, uint16(id))
	if p < 0 {
		return 0, false
	}
	return caps.clock[id].Load() - st[p], true
}
