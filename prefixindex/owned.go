package prefixindex

// Owned returns, for each interned upstream, the number of entries it
// owns: its share of the index, without what its capacity says its
// engine has evicted. It sweeps every shard, sweepBatch entries per lock
// hold, so it is the slow path (metrics scrapes, the admin API): about a
// millisecond per 100k entries.
func (ix *Index) Owned() map[string]int {
	var counts [MaxIDs + 1]int32
	caps := ix.caps.Load()
	for i := range ix.shards {
		ix.shards[i].countOwners(&counts, caps)
	}
	names := *ix.ids.Load()
	owned := make(map[string]int, len(names))
	for name, id := range names {
		owned[name] = int(counts[id])
	}
	return owned
}

// countOwners adds one to counts[id] for every entry id owns and, with
// caps, its engine has not evicted.
func (s *shard) countOwners(counts *[MaxIDs + 1]int32, caps *capacities) {
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
				counts[uint16(o)]++
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
