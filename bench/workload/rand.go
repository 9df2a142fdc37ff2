package workload

import "math"

// rng is a splitmix64 generator. The workloads use it rather than math/rand
// so that a seed names the same workload in every Go release.
type rng struct{ state uint64 }

// newRNG returns a generator seeded by the mix of the given words, so that
// independent streams (one per group, per conversation, ...) come from one
// workload seed.
func newRNG(words ...uint64) *rng {
	var s uint64 = 0x6a09e667f3bcc909
	for _, w := range words {
		s = mix64(s ^ mix64(w+0x9e3779b97f4a7c15))
	}
	return &rng{state: s}
}

// next returns the next 64 random bits.
func (r *rng) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	return mix64(r.state)
}

// intn returns a uniform integer in [0, n); n must be positive.
func (r *rng) intn(n int) int {
	return int(r.next() % uint64(n))
}

// between returns a uniform integer in [lo, hi]; hi < lo returns lo.
func (r *rng) between(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + r.intn(hi-lo+1)
}

// float returns a uniform float64 in [0, 1).
func (r *rng) float() float64 {
	return float64(r.next()>>11) / (1 << 53)
}

// exp returns an exponentially distributed value with the given mean.
func (r *rng) exp(mean float64) float64 {
	return -math.Log(1-r.float()) * mean
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// hashString folds s into a seed word (FNV-1a).
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
