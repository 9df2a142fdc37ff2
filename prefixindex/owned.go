package prefixindex

// Owned returns, for each interned upstream, the number of entries it
// owns: its share of the index, without what its capacity says its
// engine has evicted. It sweeps every shard, sweepBatch entries per lock
// hold, so it is the slow path (metrics scrapes, the admin API): about a
// millisecond per 100k entries.
//
// Its counts cover the interned IDs only, up to the largest, not every
// possible ID: an array of MaxIDs counters would be 256 KiB of garbage
// per metrics scrape, which the collector lets wait beside the live heap
// until the heap has grown by GOGC percent.
func (ix *Index) Owned() map[string]int {
	names := *ix.ids.Load()
	var top ID
	for _, id := range names {
		top = max(top, id)
	}
	counts := make([]int32, int(top)+1)
	caps := ix.caps.Load()
	for i := range ix.shards {
		ix.shards[i].countOwners(counts, caps)
	}
	owned := make(map[string]int, len(names))
	for name, id := range names {
		owned[name] = int(counts[id])
	}
	return owned
}

// countOwners adds one to counts[id] for every entry id owns and, with
// caps, its engine has not evicted, for the ids counts covers.
func (s *shard) countOwners(counts []int32, caps *capacities) {
	for pos := 1; ; pos += sweepBatch {
		s.mu.Lock()
		end := min(len(s.entries), pos+sweepBatch)
		for idx := pos; idx < end; idx++ {
			for o, p := s.entries[idx].owners, 0; o != 0; o, p = o>>16, p+1 {
				if caps != nil {
					var st uint32
					if s.stamps != nil {
						st = s.stamps[idx][p]
					}
					if caps.evicted(ID(o), st) {
						continue
					}
				}
				if id := int(uint16(o)); id < len(counts) {
					counts[id]++
				}
			}
		}
		done := end >= len(s.entries)
		s.mu.Unlock()
		if done {
			return
		}
	}
}

// Names returns the interned upstream names.
func (ix *Index) Names() []string {
	names := *ix.ids.Load()
	out := make([]string, 0, len(names))
	for name := range names {
		out = append(out, name)
	}
	return out
}
