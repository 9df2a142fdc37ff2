package prefixindex

import (
	"math/bits"
	"slices"
	"sync"
	"unsafe"
)

// A shard is one lock's worth of the index: a bounded map from chunk hash
// to owners, in two flat arrays and no pointers, so the garbage collector
// never scans it and an entry costs 24 bytes plus its share of the slot table.
//
//   - entries holds the entries. entries[0] and entries[1] are the
//     sentinels of two circular, index-linked LRU lists (a segmented LRU):
//     the protected list (entries[0]) of entries a confirmed answer vouched
//     for, and the probation list (entries[1]) of entries only recorded so
//     far. A sentinel's next is its list's most recently used entry, its prev
//     the least. An entry's list is the probBit of its next link. A free
//     entry has owners == 0 and is linked into the free list through next.
//   - slots is an open-addressed, linearly probed table (power-of-two length,
//     load at most 3/4, backward-shift deletion, so no tombstones). A slot is
//     0 when empty, else tag | index, where tag is the high 32 bits of the
//     entry's mixed hash m: it gives the home slot (m>>32 & mask) without
//     touching the entry, and filters probes so that a miss rarely reads
//     entries at all.
//
// Record puts new entries on probation; Confirm moves them (or creates them)
// on the protected list, which holds at most protLimit entries: beyond it,
// its least recent entry is demoted to probation. When the shard is full, a
// new entry evicts the least recent probation entry, which exists whenever
// the shard is full and protLimit < limit, so unconfirmed records can never
// evict a protected entry.
//
// Both arrays start small and double on demand, up to limit+2 entries and
// maxSlots slots, so an idle index costs almost nothing and a full one never
// exceeds its bound.
type shard struct {
	shardState
	_ [128 - unsafe.Sizeof(shardState{})%128]byte // one shard per cache line pair
}

type shardState struct {
	mu        sync.Mutex
	entries   []entry
	slots     []uint64
	free      uint32 // head of the free list, 0 if empty
	n         int    // live entries
	nProb     int    // live entries on probation
	limit     int    // most live entries
	protLimit int    // most entries on the protected list
	maxSlots  int    // slot table length that holds limit entries at load <= 3/4
	secret    uint64 // mixing key, the same for every shard of an index
	evictions uint64

	// stamps, once the index tracks capacities (capacity.go), holds each
	// entry's owners' stamps, lane for lane: entries[i]'s lane p was
	// last sent to its upstream at clock stamps[i][p]. nil before.
	stamps [][MaxOwners]uint32
	// The update in progress (Index.update, under mu), with stamps: the
	// recording upstream's clock and capacity, and the entries that were
	// new to it.
	capNow, capLimit uint32
	capFresh         int
}

// entry is one chunk hash and its owners: four 16-bit IDs, lane 0 (the low
// bits) the most recent, unused lanes 0.
type entry struct {
	key        uint64
	owners     uint64
	prev, next uint32
}

const (
	entrySize  = int64(unsafe.Sizeof(entry{}))
	stampsSize = int64(unsafe.Sizeof([MaxOwners]uint32{}))
	slotSize   = int64(unsafe.Sizeof(uint64(0)))
	shardSize  = int64(unsafe.Sizeof(shard{}))

	tagMask      = uint64(1<<64 - 1<<32)
	protHead     = 0       // sentinel of the protected list
	probHead     = 1       // sentinel of the probation list
	sentinels    = 2       // entries before the first real one
	probBit      = 1 << 31 // in entry.next: the entry is on probation
	initialSlots = 64      // first table, 512 bytes
	initialCap   = 48      // first entries array: 3/4 of initialSlots
	sweepBatch   = 4096
)

// maxSlotsFor returns the slot table length that holds limit entries at a
// load of at most 3/4: the smallest power of two >= ceil(4*limit/3).
func maxSlotsFor(limit int) int {
	need := (4*limit + 2) / 3
	return 1 << bits.Len(uint(need-1))
}

// init sets the bounds of an empty shard: limit entries, of which at most
// protLimit on the protected list.
func (s *shard) init(limit, protLimit int, secret uint64) {
	s.limit = limit
	s.protLimit = protLimit
	s.secret = secret
	s.maxSlots = maxSlotsFor(limit)
}

// bytes returns the memory held by s. s.mu must be held.
func (s *shard) bytes() int64 {
	return shardSize + int64(cap(s.entries))*entrySize + int64(cap(s.slots))*slotSize + int64(cap(s.stamps))*stampsSize
}

// reset forgets every entry and releases the arrays. s.mu must be held.
func (s *shard) reset() {
	s.entries = nil
	s.slots = nil
	s.free = 0
	s.n = 0
	s.nProb = 0
	if s.stamps != nil {
		s.stamps = make([][MaxOwners]uint32, 0) // kept on, its array released
	}
}

// lookup returns the index of key's entry, or 0. m is mix(key).
func (s *shard) lookup(m, key uint64) uint32 {
	if len(s.slots) == 0 {
		return 0
	}
	mask := uint64(len(s.slots) - 1)
	tag := m & tagMask
	for i := m >> 32 & mask; ; i = (i + 1) & mask {
		v := s.slots[i]
		if v == 0 {
			return 0
		}
		if v&tagMask == tag {
			if idx := uint32(v); s.entries[idx].key == key {
				return idx
			}
		}
	}
}

// ownersStamped returns the owners of key and their stamps, 0 if none.
// A shard not updated since the index began tracking capacities has no
// stamps yet: its owners are stamped at the clocks' start, as initStamps
// would.
func (s *shard) ownersStamped(m, key uint64) (uint64, [MaxOwners]uint32) {
	if idx := s.lookup(m, key); idx != 0 {
		if s.stamps == nil {
			return s.entries[idx].owners, [MaxOwners]uint32{}
		}
		return s.entries[idx].owners, s.stamps[idx]
	}
	return 0, [MaxOwners]uint32{}
}

// owners returns the owners of key, 0 if none.
func (s *shard) owners(m, key uint64) uint64 {
	if idx := s.lookup(m, key); idx != 0 {
		return s.entries[idx].owners
	}
	return 0
}

// addOwner makes owner the most recent owner of entry idx, stamped with
// the update's clock, and counts the entry as fresh when owner did not
// hold it, or held it past its capacity.
func (s *shard) addOwner(idx uint32, owner uint16) {
	e := &s.entries[idx]
	if s.stamps != nil {
		st := &s.stamps[idx]
		p := laneOf(e.owners, owner)
		if p < 0 || s.capLimit != 0 && s.capNow-st[p] > s.capLimit {
			s.capFresh++
		}
		pushStamp(st, p, s.capNow)
	}
	e.owners = pushOwner(e.owners, owner)
}

// record makes owner the most recent owner of key and key's entry the most
// recently used of its list, creating it on probation (and evicting the
// least recently used probation entry if the shard is full) if needed.
func (s *shard) record(m, key uint64, owner uint16) {
	if idx := s.lookup(m, key); idx != 0 {
		s.addOwner(idx, owner)
		e := &s.entries[idx]
		head := uint32(protHead)
		if e.next&probBit != 0 {
			head = probHead
		}
		s.unlink(idx)
		s.pushFront(head, idx)
		return
	}
	s.insert(m, key, owner, probHead)
}

// confirm makes owner the most recent owner of key and key's entry the most
// recently used protected entry, promoting it from probation or creating it
// if needed, and demotes the least recent protected entry to probation if
// the protected list is then over its bound.
func (s *shard) confirm(m, key uint64, owner uint16) {
	idx := s.lookup(m, key)
	if idx == 0 {
		if s.protLimit == 0 {
			s.insert(m, key, owner, probHead)
			return
		}
		s.insert(m, key, owner, protHead)
	} else {
		s.addOwner(idx, owner)
		e := &s.entries[idx]
		if e.next&probBit == 0 {
			s.unlink(idx)
			s.pushFront(protHead, idx)
			return
		}
		if s.protLimit == 0 {
			s.unlink(idx)
			s.pushFront(probHead, idx)
			return
		}
		s.unlink(idx)
		s.nProb--
		s.pushFront(protHead, idx)
	}
	if s.n-s.nProb > s.protLimit {
		last := s.entries[protHead].prev
		s.unlink(last)
		s.pushFront(probHead, last)
		s.nProb++
	}
}

// insert creates key's entry, owned by owner, at the front of the list of
// head, evicting the least recently used probation entry (or, with none,
// the least recently used protected one) if the shard is full.
func (s *shard) insert(m, key uint64, owner uint16, head uint32) {
	var idx uint32
	if s.n >= s.limit {
		victim := uint32(probHead)
		if s.nProb == 0 {
			victim = protHead
		}
		idx = s.entries[victim].prev
		s.slotDelete(mix(s.entries[idx].key, s.secret), idx)
		s.unlink(idx)
		s.n--
		if victim == probHead {
			s.nProb--
		}
		s.evictions++
	} else {
		idx = s.alloc()
	}
	s.entries[idx] = entry{key: key, owners: uint64(owner)}
	if s.stamps != nil {
		s.stamps[idx] = [MaxOwners]uint32{s.capNow}
		s.capFresh++
	}
	s.pushFront(head, idx)
	s.slotInsert(m, idx)
	s.n++
	if head == probHead {
		s.nProb++
	}
}

// alloc returns a free entry index, growing the arrays if needed. The shard
// must have room: s.n < s.limit.
func (s *shard) alloc() uint32 {
	if s.entries == nil {
		s.entries = growEntries(nil, min(initialCap, s.limit+sentinels))
		s.entries = s.entries[:sentinels]
		s.entries[probHead] = entry{prev: probHead, next: probHead | probBit}
		s.slots = make([]uint64, min(initialSlots, s.maxSlots))
		s.growStamps()
	}
	if 4*(s.n+1) > 3*len(s.slots) {
		s.growSlots()
	}
	if idx := s.free; idx != 0 {
		s.free = s.entries[idx].next
		return idx
	}
	if len(s.entries) == cap(s.entries) {
		s.entries = growEntries(s.entries, min(2*cap(s.entries), s.limit+sentinels))
	}
	s.entries = s.entries[:len(s.entries)+1]
	s.growStamps()
	return uint32(len(s.entries) - 1)
}

// growEntries returns a copy of entries with capacity for at least n. The
// capacity is rounded up to what the allocator hands out anyway (its size
// class, or whole pages for a large array), so that cap, and so Stats().Bytes,
// is what the heap holds. Entries beyond limit+2 are never used.
func growEntries(entries []entry, n int) []entry {
	return append(slices.Grow([]entry(nil), n), entries...)
}

// growSlots doubles the slot table. Slots carry their home in their tag, so
// rehashing never reads the entries.
func (s *shard) growSlots() {
	old := s.slots
	s.slots = make([]uint64, 2*len(old))
	mask := uint64(len(s.slots) - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := v >> 32 & mask
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = v
	}
}

// slotInsert puts idx, whose key mixes to m, into the slot table.
func (s *shard) slotInsert(m uint64, idx uint32) {
	mask := uint64(len(s.slots) - 1)
	i := m >> 32 & mask
	for s.slots[i] != 0 {
		i = (i + 1) & mask
	}
	s.slots[i] = m&tagMask | uint64(idx)
}

// slotDelete removes idx, whose key mixes to m, from the slot table, shifting
// later slots of the probe run back so that no tombstone is needed.
func (s *shard) slotDelete(m uint64, idx uint32) {
	mask := uint64(len(s.slots) - 1)
	i := m >> 32 & mask
	for uint32(s.slots[i]) != idx {
		i = (i + 1) & mask
	}
	for j := i; ; {
		s.slots[i] = 0
		for {
			j = (j + 1) & mask
			v := s.slots[j]
			if v == 0 {
				return
			}
			// v may move back to i unless its home lies cyclically in (i, j].
			home := v >> 32 & mask
			if (j-home)&mask >= (j-i)&mask {
				s.slots[i] = v
				i = j
				break
			}
		}
	}
}

// remove frees entry idx. s.mu must be held.
func (s *shard) remove(idx uint32, m uint64) {
	if s.entries[idx].next&probBit != 0 {
		s.nProb--
	}
	s.slotDelete(m, idx)
	s.unlink(idx)
	s.entries[idx] = entry{next: s.free}
	s.free = idx
	s.n--
}

// unlink takes idx out of its list; its own links are left as they were.
func (s *shard) unlink(idx uint32) {
	e := &s.entries[idx]
	prev, next := e.prev, e.next&^probBit
	p := &s.entries[prev]
	p.next = p.next&probBit | next
	s.entries[next].prev = prev
}

// pushFront makes idx the most recently used entry of the list whose
// sentinel is head.
func (s *shard) pushFront(head, idx uint32) {
	h := &s.entries[head]
	first := h.next &^ probBit
	flag := h.next & probBit
	s.entries[idx].prev = head
	s.entries[idx].next = first | flag
	s.entries[first].prev = idx
	h.next = flag | idx
}

// forget removes owner id from every entry, freeing entries left without an
// owner. It sweeps the entries array in order, sweepBatch entries per lock
// hold, so that requests on this shard wait for at most one batch. New
// entries cannot gain id meanwhile: the caller marked id dead before the
// first batch, and record checks that under the same lock.
func (s *shard) forget(id uint16) {
	for pos := sentinels; ; pos += sweepBatch {
		s.mu.Lock()
		end := min(len(s.entries), pos+sweepBatch)
		for idx := pos; idx < end; idx++ {
			e := &s.entries[idx]
			if e.owners == 0 {
				continue
			}
			o := removeOwner(e.owners, id)
			if o != e.owners && s.stamps != nil {
				removeStamp(&s.stamps[idx], laneOf(e.owners, id))
			}
			switch {
			case o == e.owners:
			case o == 0:
				s.remove(uint32(idx), mix(e.key, s.secret))
			default:
				e.owners = o
			}
		}
		done := end >= len(s.entries)
		s.mu.Unlock()
		if done {
			return
		}
	}
}

// mix scrambles a chunk hash with the index's secret. The low bits of the
// result pick the shard, the high 32 bits the home slot and the slot tag.
// Chunk hashes are xxh3 outputs, already uniform, but they are computed from
// client text with a public seed; mixing with a per-index random secret keeps
// a client from crafting prompts whose chunks pile onto one shard or one
// probe run.
func mix(h, secret uint64) uint64 {
	hi, lo := bits.Mul64(h^secret, 0x9e3779b97f4a7c15)
	return hi ^ lo
}

// Owner lists: four 16-bit lanes of a uint64, most recent in lane 0.

const (
	laneOnes = 0x0001_0001_0001_0001
	laneHigh = 0x8000_8000_8000_8000
)

// holds reports whether owner list o contains id. id must not be 0.
func holds(o uint64, id ID) bool {
	x := o ^ uint64(id)*laneOnes
	return (x-laneOnes)&^x&laneHigh != 0
}

// removeOwner returns o without id, the later lanes moved down.
func removeOwner(o uint64, id uint16) uint64 {
	for p := uint(0); p < MaxOwners*16; p += 16 {
		if uint16(o>>p) == id {
			return o&(1<<p-1) | o>>(p+16)<<p
		}
	}
	return o
}

// pushOwner returns o with id in front, dropping the least recent owner if
// o already had MaxOwners others.
func pushOwner(o uint64, id uint16) uint64 {
	return removeOwner(o, id)<<16 | uint64(id)
}
