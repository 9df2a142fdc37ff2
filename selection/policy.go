package selection

import (
	"fmt"
	"math"
)

// DefaultLoadFactor is the default Policy.LoadFactor: no candidate takes a
// request that would put it above 1.25 times the mean in-flight load (plus
// the allowance). It is the factor KubeAI's PrefixHash strategy uses for
// LLM replicas, and the low end of the range HAProxy recommends for its
// hash-balance-factor, which vimeo contributed for its bounded-load
// consistent hashing. Lower factors spill more often and lose cache hits;
// higher ones let a hot prefix queue on one replica (docs/tuning.md).
const DefaultLoadFactor = 1.25

// DefaultColdLoadFactor is the default Policy.ColdLoadFactor: a cold
// request skips any candidate carrying more than the mean in-flight load
// (rounded up, counting the request). Moving a cold request loses no
// cached prefix, since no candidate holds one, so it may be bounded as
// tightly as balance asks; a warm request's bound stays loose because
// moving it throws its cache away. Rendezvous hashing alone places new
// prompt families like balls in bins, and the busiest engine then evicts
// families it will be asked for again; the bound evens them out (the
// measurements are in docs/tuning.md). On an idle fleet every candidate
// is within it. Only the rules read it; the cost places cold requests by
// the queues instead.
const DefaultColdLoadFactor = 1.0

// DefaultAllowance is the default Policy.Allowance, in requests in flight.
// An engine with continuous batching runs hundreds of sequences at once, so
// a replica holding a handful more requests than its peers is not
// overloaded, and spilling it would only throw its cache away: at low load
// the multiplicative bound alone would push the second request of a
// conversation off its warm replica. The allowance lets a replica run that
// many requests beyond the multiplicative bound before any spill. It is a
// starting point, to be tuned from bench/ results.
const DefaultAllowance = 16

// DefaultMinDepth is the default Policy.MinDepth, in chunks. With 256-byte
// chunks, 4 chunks are 1 KiB of routing text: about 250 tokens, or 16 KV
// blocks of 16 tokens. A shorter shared prefix is mostly chat-template
// boilerplate and the opening of a common system prompt. Reusing it saves
// little prefill, and following it would herd unrelated conversations onto
// whichever replica saw that opening first. Such requests are better placed
// by rendezvous hashing, which spreads conversations and still sends every
// later turn of one conversation to the same replica. Deeper matches (a
// real system prompt, tool definitions, earlier turns) are worth following.
// Scale it with the chunk size to keep about 1 KiB. With Policy.Sticky it is
// also the least prefill a move must save: a request shorter than it
// counts as that long in the margin.
const DefaultMinDepth = 4

// DefaultCacheWeight is the default Policy.CacheWeight: moving a request
// off its deepest holder must save at least as much predicted time to
// first token as the prefill the fleet recomputes for it. Staying home
// already costs the request only its unmatched part, so the prefix counts
// twice against a move: once in the request's own time to first token
// and once more as duplicated work (the KV cache the copy takes, the
// prefill the engine does instead of another request's). 0 is pure
// predicted time to first token; larger values keep affinity as the
// rules do. 2 counts that duplicated work twice: a second copy of a
// prefix also evicts what the engine held, which other requests would
// have reused. It is the tuning set's pick by the race's rule among the
// values swept (docs/tuning.md, "cache_weight: 2").
const DefaultCacheWeight = 2.0

// maxBoundTerm caps the multiplicative term of the bound, so that a huge or
// infinite LoadFactor cannot overflow int on any platform. No upstream
// holds two billion requests in flight.
const maxBoundTerm = math.MaxInt32

// Policy is the choosing policy. The zero value is not valid; a caller sets
// the fields (usually to the Default constants) and calls Validate once, on
// the slow path. A Policy is a value: Choose is safe for concurrent use.
type Policy struct {
	// LoadFactor multiplies the mean in-flight load, counting the
	// incoming request, to give the bound. At least 1.
	LoadFactor float64
	// Allowance is added to the bound, in requests in flight, so the
	// bound never forces spreading at low load. At least 0.
	Allowance int
	// MinDepth is the shallowest match, in chunks, that counts: a
	// request no candidate holds to this depth is cold. At least 1;
	// Choose treats smaller values as 1.
	MinDepth int
	// ByteAllowance turns on the byte bound and is added to it, in the
	// unit of Candidate.Bytes: a candidate is under the bound only if
	// its requests in flight are within Bound and the prompt bytes it
	// has in flight are within ByteBound. 0 turns the byte bound off.
	// At least 0.
	ByteAllowance int64
	// ColdLoadFactor, when set, bounds cold placements more tightly than
	// warm ones: a cold request (no holder) counts a candidate as under
	// the bound only if, besides the bound, its load stays within
	// ceil(ColdLoadFactor * (sum(Load) + 1) / n), with no allowance. At
	// least 1 and at most LoadFactor; 0 turns it off.
	ColdLoadFactor float64
	// ColdBacklog places cold requests by Candidate.Backlog as well: a
	// cold request goes, among the candidates under the bound and the
	// cold bound, to the one with the least backlog, the highest-ranked
	// by rendezvous hashing on a tie. With no backlog anywhere that is
	// the placement the cold bound gives.
	ColdBacklog bool

	// Cost chooses by one cost instead of the rules: among the
	// candidates under the bound, the least predicted time to first
	// token plus CacheWeight times the prefill that moving off the
	// deepest holder throws away (see the package documentation).
	// It is caddymodule's default: it weighs the queue in front of a
	// warm request, which the rules never do, so a conversation leaves
	// a holder whose queue outweighs its cached prefix, and a burst of
	// new ones spreads by the queues, while an idle fleet routes as the
	// rules do. ColdLoadFactor and ColdBacklog belong to the rules:
	// with Cost they are not read.
	Cost bool
	// ChunkSize is the units of size (bytes of routing text in
	// caddymodule) per chunk of depth: a candidate at depth d holds
	// min(d*ChunkSize, size) of the request. At least 1 with Cost.
	ChunkSize int
	// NsPerByte is the prefill time per unit of size of a candidate
	// whose Candidate.NsPerByte is unset, and the scale of the cache
	// term and of the sticky margin. Finite and at least 0; with
	// 0 (and no candidate speeds) the cost sees neither queues nor
	// prompts, and chooses as the rules do with no cold bound.
	NsPerByte float64
	// CacheWeight weighs the prefill a move throws away against the
	// time to first token it saves: 0 is pure predicted time to first
	// token, larger values keep conversations on their holders. Finite
	// and at least 0. Only Cost reads it.
	CacheWeight float64
	// Sticky, with Cost, keeps a request at its home (the deepest
	// holder under the bound, else the rendezvous-hash winner under
	// it) unless moving saves more than a margin: the request's own
	// prefill plus all it is predicted to wait where it goes. Set it
	// while this instance's placements do not reach the other
	// instances of its tier (caddymodule sets it while the sync
	// channel is down): each then sees only its own share of the
	// queues, and a choice by the least cost alone would place a
	// conversation differently on each. Without it the least cost
	// wins. Only Cost reads it.
	Sticky bool
}

// Validate reports the first invalid field of p, naming it as the
// configuration does and giving its value.
func (p Policy) Validate() error {
	if !(p.LoadFactor >= 1) { // also rejects NaN
		return fmt.Errorf("load_factor must be at least 1, got %v", p.LoadFactor)
	}
	if math.IsInf(p.LoadFactor, 1) {
		return fmt.Errorf("load_factor must be finite, got %v", p.LoadFactor)
	}
	if p.Allowance < 0 {
		return fmt.Errorf("allowance must be at least 0, got %d", p.Allowance)
	}
	if p.MinDepth < 1 {
		return fmt.Errorf("min_depth must be at least 1, got %d", p.MinDepth)
	}
	if p.ByteAllowance < 0 {
		return fmt.Errorf("byte allowance must be at least 0, got %d", p.ByteAllowance)
	}
	if p.ColdLoadFactor != 0 && !(p.ColdLoadFactor >= 1 && p.ColdLoadFactor <= p.LoadFactor) {
		return fmt.Errorf("cold_load_factor must be 0 (off) or between 1 and load_factor (%v), got %v", p.LoadFactor, p.ColdLoadFactor)
	}
	if !(p.NsPerByte >= 0) || math.IsInf(p.NsPerByte, 1) { // also rejects NaN
		return fmt.Errorf("prefill time per byte must be finite and at least 0, got %v", p.NsPerByte)
	}
	if !(p.CacheWeight >= 0) || math.IsInf(p.CacheWeight, 1) {
		return fmt.Errorf("cache_weight must be finite and at least 0, got %v", p.CacheWeight)
	}
	if p.Cost && p.ChunkSize < 1 {
		return fmt.Errorf("chunk_size must be at least 1, got %d", p.ChunkSize)
	}
	return nil
}

// Bound returns the in-flight bound for cands, counting the incoming
// request:
//
//	ceil(LoadFactor * (sum(Load) + 1) / len(cands)) + Allowance
//
// A candidate is under the bound when Load + 1 <= Bound. Bound returns 0
// for no candidates. For an invalid policy it stays defined: a NaN or
// non-positive product counts as 0, the product is capped at MaxInt32,
// and the result saturates at MaxInt and is never negative.
func (p Policy) Bound(cands []Candidate) int {
	if len(cands) == 0 {
		return 0
	}
	return p.bound(loadSum(cands), len(cands))
}

// bound is Bound for a known total load over n > 0 candidates.
func (p Policy) bound(sum, n int) int {
	f := math.Ceil(p.LoadFactor * float64(sum+1) / float64(n))
	var b int
	switch {
	case f >= maxBoundTerm:
		b = maxBoundTerm
	case f > 0:
		b = int(f)
	default: // zero, negative or NaN
		b = 0
	}
	switch {
	case p.Allowance > math.MaxInt-b:
		return math.MaxInt
	case b+p.Allowance < 0:
		return 0
	}
	return b + p.Allowance
}

// ColdBound returns the in-flight bound for a cold request among cands,
// or 0 when the cold bound is off (ColdLoadFactor 0; for an invalid
// policy, also when the product is not positive):
//
//	min(Bound, ceil(ColdLoadFactor * (sum(Load) + 1) / len(cands)))
//
// A cold request's candidate must have Load + 1 <= ColdBound as well as
// being under the bound. With ColdLoadFactor >= 1 the least-loaded
// candidate always is (see the package documentation).
func (p Policy) ColdBound(cands []Candidate) int {
	if p.ColdLoadFactor == 0 || len(cands) == 0 {
		return 0
	}
	return p.coldBound(loadSum(cands), len(cands))
}

// coldBound is ColdBound for a known total load over n > 0 candidates,
// with the cold bound on.
func (p Policy) coldBound(sum, n int) int {
	cold := Policy{LoadFactor: p.ColdLoadFactor}
	return min(p.bound(sum, n), cold.bound(sum, n))
}

// loadSum is the total in-flight load of cands.
func loadSum(cands []Candidate) int {
	sum := 0
	for i := range cands {
		sum += cands[i].Load
	}
	return sum
}

// ByteBound returns the byte bound for cands and an incoming request of
// the given size, or 0 when the byte bound is off (ByteAllowance <= 0):
//
//	ceil(LoadFactor * (sum(Bytes) + size) / len(cands)) + ByteAllowance
//
// A candidate is under it when Bytes <= ByteBound: the bytes it already
// has in flight, not counting the incoming request, are within the bound.
// (The request bound counts the incoming request at the candidate; with
// sizes that vary by orders of magnitude, doing so here would leave a
// request larger than the bound nowhere to go.) The candidate with the
// fewest bytes in flight is always under it, since it holds at most the
// mean. The result saturates at MaxInt64 and is at least ByteAllowance.
func (p Policy) ByteBound(cands []Candidate, size int64) int64 {
	if p.ByteAllowance <= 0 || len(cands) == 0 {
		return 0
	}
	sum := float64(max(size, 0))
	for i := range cands {
		sum += float64(cands[i].Bytes)
	}
	f := math.Ceil(p.LoadFactor * sum / float64(len(cands)))
	var b int64
	switch {
	case f >= math.MaxInt64/2:
		b = math.MaxInt64 / 2
	case f > 0:
		b = int64(f)
	}
	if p.ByteAllowance > math.MaxInt64-b {
		return math.MaxInt64
	}
	return b + p.ByteAllowance
}
