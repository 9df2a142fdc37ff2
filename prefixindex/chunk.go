package prefixindex

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/zeebo/xxh3"
)

// Chunking defaults.
const (
	// DefaultChunkSize is the bytes of routing text per chunk. 256 bytes is
	// about 64 tokens of English text, four 16-token vLLM KV blocks: fine
	// enough that a match depth tracks the engine's block-granular cache to
	// within a few blocks, coarse enough that a 128k-token prompt is only
	// 2048 hashes.
	DefaultChunkSize = 256

	// DefaultMaxChunks caps the hashes of one request: 2048 chunks of 256
	// bytes is 512 KiB of routing text, about 128k tokens, the context window
	// of most current models. Deeper chunks rarely change the choice and
	// would only cost index entries.
	DefaultMaxChunks = 2048
)

// seedDomain starts every seed chain, so that prefixcache hashes never equal
// plain xxh3 hashes of the same fields. It is ASCII "pfxcache". Part of the
// wire format.
const seedDomain = 0x7066786361636865

// Hash names a whole prefix: the chained hash of every chunk up to and
// including one. Equal hashes mean equal prefixes (up to 64-bit collisions)
// under equal seeds.
//
// Hashes are a wire format: independent Caddy instances, and this process
// across versions, must compute the same hashes for the same text. The golden
// test pins them.
type Hash uint64

// Seed derives the chain seed from the parts that must never share index
// entries: the model, the engine's cache_salt and a tenant key. Each part is
// hashed by its own xxh3 call, chained, so the parts are unambiguous:
// ("ab", "c") and ("a", "bc") give different seeds. An empty part and an
// absent (nil) part give the same seed. Seed does not allocate.
//
// The scheme is h = xxh3.HashSeed(model, seedDomain), then
// h = xxh3.HashSeed(salt, h), then h = xxh3.HashSeed(tenant, h).
func Seed(model, salt, tenant []byte) Hash {
	return KeyedSeed(0, model, salt, tenant)
}

// KeyedSeed is Seed under a key, a secret the edges of a tier share: the
// chain starts from seedDomain XOR key instead of seedDomain, so without
// the key no one can compute the seed of a guessed model, salt and
// tenant. KeyedSeed(0, ...) is Seed(...).
func KeyedSeed(key uint64, model, salt, tenant []byte) Hash {
	h := xxh3.HashSeed(model, seedDomain^key)
	h = xxh3.HashSeed(salt, h)
	h = xxh3.HashSeed(tenant, h)
	return Hash(h)
}

// Chunker splits routing text into fixed-size chunks and hashes them, chained.
// The zero Chunker (or one with Size or MaxChunks below 1) hashes nothing; use
// NewChunker to get a checked one.
type Chunker struct {
	// Size is the bytes of text per chunk.
	Size int
	// MaxChunks is the most hashes Append produces for one text.
	MaxChunks int
	// Key, when not 0, keys the hashes Append returns: each is the chain
	// hash mixed with Key (see Append), a secret the edges of a tier
	// share, so that a reader of the hashes cannot extend a chain it saw
	// with guessed text.
	Key uint64
}

// NewChunker returns a Chunker of size bytes per chunk producing at most
// maxChunks hashes per text. It returns an error if either is below 1.
func NewChunker(size, maxChunks int) (Chunker, error) {
	if size < 1 {
		return Chunker{}, fmt.Errorf("chunk size must be positive, got %d", size)
	}
	if maxChunks < 1 {
		return Chunker{}, fmt.Errorf("max chunks must be positive, got %d", maxChunks)
	}
	return Chunker{Size: size, MaxChunks: maxChunks}, nil
}

// Len returns the number of hashes Append produces for n bytes of text:
// min(n/Size, MaxChunks), or 0 for an unusable Chunker.
func (c Chunker) Len(n int) int {
	if c.Size < 1 || c.MaxChunks < 1 || n < 0 {
		return 0
	}
	return min(n/c.Size, c.MaxChunks)
}

// Append appends the chained hashes of the full chunks of text to dst and
// returns the extended slice:
//
//	h_0 = xxh3.HashSeed(text[0:Size], uint64(seed))
//	h_i = xxh3.HashSeed(text[i*Size:(i+1)*Size], uint64(h_{i-1}))
//
// so h_i names the whole prefix text[:(i+1)*Size]. A trailing partial chunk
// is not hashed, and at most MaxChunks hashes are appended. The hashes of a
// prefix of text are a prefix of the hashes of text. Append does not allocate
// when dst has capacity for Len(len(text)) more hashes.
//
// With a Key, the chain is the same but each hash appended is
//
//	xxh3.HashSeed(h_i as 8 little-endian bytes, Key)
//
// so the hashes that leave the process (in sync messages) are not the
// chain's links: seeing one does not give the seed of the next.
func (c Chunker) Append(dst []Hash, seed Hash, text []byte) []Hash {
	n := c.Len(len(text))
	if n == 0 {
		return dst
	}
	dst = slices.Grow(dst, n)
	h := uint64(seed)
	if c.Key == 0 {
		for i := range n {
			h = xxh3.HashSeed(text[i*c.Size:(i+1)*c.Size], h)
			dst = append(dst, Hash(h))
		}
		return dst
	}
	var b [8]byte
	for i := range n {
		h = xxh3.HashSeed(text[i*c.Size:(i+1)*c.Size], h)
		binary.LittleEndian.PutUint64(b[:], h)
		dst = append(dst, Hash(xxh3.HashSeed(b[:], c.Key)))
	}
	return dst
}
