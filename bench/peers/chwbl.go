package peers

import (
	"bytes"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/prefixcache/caddy-prefixcache/dialect"
)

// chwblRing is KubeAI's hash ring (internal/loadbalancer/balance_chwbl.go):
// each endpoint at replication points xxHash64(name + decimal replica
// index), sorted, as chwblAddEndpoint builds it.
type chwblRing struct {
	points []uint64
	owner  []int // endpoint index of each point
}

func newChwblRing(names []string, replication int) chwblRing {
	type point struct {
		h     uint64
		owner int
	}
	ps := make([]point, 0, len(names)*replication)
	for i, name := range names {
		for r := 0; r < replication; r++ {
			ps = append(ps, point{xxhash.Sum64String(name + strconv.Itoa(r)), i})
		}
	}
	slices.SortFunc(ps, func(a, b point) int {
		switch {
		case a.h < b.h:
			return -1
		case a.h > b.h:
			return 1
		}
		return a.owner - b.owner
	})
	rg := chwblRing{points: make([]uint64, len(ps)), owner: make([]int, len(ps))}
	for i, p := range ps {
		rg.points[i], rg.owner[i] = p.h, p.owner
	}
	return rg
}

// chwblLoadOK is KubeAI's bound (balance_chwbl.go, chwblLoadOK; SMG's
// prefix_hash.rs load_ok is the same): an endpoint with load requests in
// flight may take one more if load <= (total + 1) / n x factor, the "+1"
// standing for the new request in the mean only; anything goes when
// nothing is in flight.
func chwblLoadOK(load, total, n int, factor float64) bool {
	if total == 0 {
		return true
	}
	return float64(load) <= float64(total+1)/float64(n)*factor
}

// chwblKey is the ring position of a request's prefix, as chwblHash
// computes it (xxHash64 of the adapter name, none here, and the prefix).
func chwblKey(prefix []byte) uint64 { return xxhash.Sum64(prefix) }

// pick walks the ring clockwise from key's position and returns the first
// endpoint whose load is within the bound ("ring" if it is the first met,
// "walk" otherwise), or, if none is, the first endpoint met ("default"),
// as KubeAI's chwblGetAddr does.
func (rg chwblRing) pick(key uint64, loads []int, factor float64) (int, string) {
	total := 0
	for _, l := range loads {
		total += l
	}
	i, _ := slices.BinarySearch(rg.points, key)
	if i == len(rg.points) {
		i = 0
	}
	first := rg.owner[i]
	for n := range rg.points {
		ep := rg.owner[i]
		if chwblLoadOK(loads[ep], total, len(loads), factor) {
			if n == 0 {
				return ep, "ring"
			}
			return ep, "walk"
		}
		if i++; i == len(rg.points) {
			i = 0
		}
	}
	return first, "default"
}

// kubeAIPrefix returns the text KubeAI hashes: the first n characters of
// the first user message for chat-like requests (ChatCompletionRequest's
// Prefix; its text parts are joined, here with the routing text's "\n"),
// or of the first prompt for completions. It reads the routing text's
// structure (see dialect): a message is RS role US content,
// parts start with GS, batch prompts are RS-separated.
func kubeAIPrefix(text []byte, kind dialect.Kind, n int) []byte {
	var s []byte
	switch kind {
	case dialect.Completions, dialect.Generate:
		s = text
		if i := bytes.IndexByte(s, 0x1e); i >= 0 {
			s = s[:i]
		}
	default:
		i := bytes.Index(text, []byte("\x1euser\x1f"))
		if i < 0 {
			return nil
		}
		s = text[i+len("\x1euser\x1f"):]
		if j := bytes.IndexAny(s, "\x1e\x1d"); j >= 0 {
			s = s[:j]
		}
	}
	for i := 0; i < len(s); n-- {
		if n == 0 {
			return s[:i]
		}
		_, size := utf8.DecodeRune(s[i:])
		i += size
	}
	return s
}
