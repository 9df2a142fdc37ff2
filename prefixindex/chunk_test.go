package prefixindex

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// goldenText is the fixed input of the golden tests: 900 bytes.
var goldenText = []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20))

// TestGolden pins the chaining scheme and Seed as a wire format: independent
// Caddy instances and successive versions must agree on every hash, or
// routing silently loses its learned state (and instances disagree).
//
// CHANGING ANY VALUE HERE IS A BREAKING CHANGE. The values were computed once
// with xxh3 v1.1.0 and must never be regenerated to make a test pass.
func TestGolden(t *testing.T) {
	seeds := []struct {
		name                string
		model, salt, tenant string
		want                Hash
	}{
		{"empty", "", "", "", 0x8e1f8d370d5fd0ec},
		{"model", "meta-llama/Llama-3.1-8B-Instruct", "", "", 0x926923394fb83de1},
		{"all", "gpt-4o", "salt-1", "tenant-a", 0xd9c6142bc3638498},
	}
	for _, tt := range seeds {
		t.Run("Seed/"+tt.name, func(t *testing.T) {
			if got := Seed([]byte(tt.model), []byte(tt.salt), []byte(tt.tenant)); got != tt.want {
				t.Errorf("Seed(%q, %q, %q) = %#x, want %#x", tt.model, tt.salt, tt.tenant, got, tt.want)
			}
		})
	}

	chains := []struct {
		name string
		size int
		seed Hash
		want []Hash
	}{
		// 7-byte chunks exercise xxh3's short-input path, 256 the default,
		// 300 its >240-byte path (where a non-zero seed derives a secret).
		{"size7", 7, 0, []Hash{0x8706dee3383094a1, 0x11c6f6785cb41e4b, 0xc8d1d99b15196fd1}},
		{"size256", 256, Seed([]byte("gpt-4o"), nil, nil), []Hash{0xab907723219cb1a4, 0xc10e3891ca10dc2d, 0x87c85ae3fdf34fed}},
		{"size300", 300, 42, []Hash{0x38b5418e36fd9e70, 0xcceb0eb4b0b269c2, 0xad02127c772e18e0}},
	}
	for _, tt := range chains {
		t.Run("Append/"+tt.name, func(t *testing.T) {
			c := Chunker{Size: tt.size, MaxChunks: len(tt.want)}
			if got := c.Append(nil, tt.seed, goldenText); !slices.Equal(got, tt.want) {
				t.Errorf("Chunker%+v.Append(nil, %#x, goldenText) = %#x, want %#x", c, tt.seed, got, tt.want)
			}
		})
	}
}

// TestGoldenKeyed pins the keyed variant of the wire format (a tier with
// a hash key): KeyedSeed and a Chunker with a Key. TestGolden, unchanged,
// pins the unkeyed scheme, which KeyedSeed(0, ...) and a Chunker without a
// Key still compute.
//
// CHANGING ANY VALUE HERE IS A BREAKING CHANGE for keyed tiers. The values
// were computed once with xxh3 v1.1.0 and must never be regenerated to
// make a test pass.
func TestGoldenKeyed(t *testing.T) {
	const seedKey, chainKey = 0x6b65792d6f6e65, 0x6b65792d74776f // "key-one", "key-two"
	if got, want := KeyedSeed(seedKey, []byte("gpt-4o"), []byte("salt-1"), []byte("tenant-a")), Hash(0x1ea5ea5e6125d4ad); got != want {
		t.Errorf("KeyedSeed(%#x, gpt-4o, salt-1, tenant-a) = %#x, want %#x", seedKey, got, want)
	}
	if got, want := KeyedSeed(0, []byte("gpt-4o"), []byte("salt-1"), []byte("tenant-a")), Seed([]byte("gpt-4o"), []byte("salt-1"), []byte("tenant-a")); got != want {
		t.Errorf("KeyedSeed(0, ...) = %#x, want Seed(...) = %#x", got, want)
	}
	for _, tt := range []struct {
		name string
		size int
		seed Hash
		want []Hash
	}{
		{"size7", 7, 0, []Hash{0x4345bd38815fcc8c, 0xeaa64c0ea169fc74, 0xe50170c7fabcca14}},
		{"size256", 256, KeyedSeed(seedKey, []byte("gpt-4o"), nil, nil), []Hash{0x9b692a7e2ae452a7, 0x849930de0d97606, 0xc79301328335471a}},
	} {
		t.Run("Append/"+tt.name, func(t *testing.T) {
			c := Chunker{Size: tt.size, MaxChunks: len(tt.want), Key: chainKey}
			got := c.Append(nil, tt.seed, goldenText)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Chunker%+v.Append(nil, %#x, goldenText) = %#x, want %#x", c, tt.seed, got, tt.want)
			}
			// Written out: the unkeyed chain, each link mixed with the key.
			links := refChain(tt.size, len(tt.want), tt.seed, goldenText)
			for i, h := range links {
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], uint64(h))
				if want := Hash(xxh3.HashSeed(b[:], chainKey)); i < len(got) && got[i] != want {
					t.Errorf("keyed hash %d = %#x, want the chain link %#x mixed with the key, %#x", i, got[i], h, want)
				}
				if i < len(got) && got[i] == h {
					t.Errorf("keyed hash %d equals the chain link", i)
				}
			}
		})
	}
}

// A keyed Chunker allocates no more than an unkeyed one.
func TestKeyedAppendAllocs(t *testing.T) {
	c := Chunker{Size: 256, MaxChunks: 64, Key: 7}
	dst := make([]Hash, 0, 64)
	if n := testing.AllocsPerRun(100, func() { c.Append(dst[:0], 1, goldenText) }); n != 0 {
		t.Errorf("keyed Append allocates %v times, want 0", n)
	}
}

// refChain is the chaining scheme written out, as a reader of the wire format
// would implement it.
func refChain(size, maxChunks int, seed Hash, text []byte) []Hash {
	var out []Hash
	h := uint64(seed)
	for i := 0; (i+1)*size <= len(text) && i < maxChunks; i++ {
		h = xxh3.HashSeed(text[i*size:(i+1)*size], h)
		out = append(out, Hash(h))
	}
	return out
}

func TestNewChunker(t *testing.T) {
	tests := []struct {
		name            string
		size, maxChunks int
		wantErr         bool
	}{
		{"ok", 256, 2048, false},
		{"one", 1, 1, false},
		{"zero size", 0, 10, true},
		{"negative size", -1, 10, true},
		{"zero max", 256, 0, true},
		{"negative max", 256, -5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewChunker(tt.size, tt.maxChunks)
			if (err != nil) != tt.wantErr {
				t.Fatalf("NewChunker(%d, %d) error = %v, want error %v", tt.size, tt.maxChunks, err, tt.wantErr)
			}
			if err == nil && (c.Size != tt.size || c.MaxChunks != tt.maxChunks) {
				t.Errorf("NewChunker(%d, %d) = %+v, want Size %d MaxChunks %d", tt.size, tt.maxChunks, c, tt.size, tt.maxChunks)
			}
		})
	}
}

func TestChunkerAppend(t *testing.T) {
	text := bytes.Repeat([]byte("0123456789abcdef"), 64) // 1024 bytes
	tests := []struct {
		name    string
		c       Chunker
		textLen int
		wantLen int
	}{
		{"exact", Chunker{Size: 256, MaxChunks: 100}, 1024, 4},
		{"partial tail not hashed", Chunker{Size: 256, MaxChunks: 100}, 1023, 3},
		{"shorter than a chunk", Chunker{Size: 256, MaxChunks: 100}, 255, 0},
		{"empty", Chunker{Size: 256, MaxChunks: 100}, 0, 0},
		{"capped", Chunker{Size: 16, MaxChunks: 10}, 1024, 10},
		{"size one", Chunker{Size: 1, MaxChunks: 2000}, 1024, 1024},
		{"zero chunker", Chunker{}, 1024, 0},
		{"zero max", Chunker{Size: 16}, 1024, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []Hash{7, 8}
			got := tt.c.Append(slices.Clone(prefix), 99, text[:tt.textLen])
			if !slices.Equal(got[:2], prefix) {
				t.Fatalf("Chunker%+v.Append(%v, ...) clobbered dst: got %v", tt.c, prefix, got[:2])
			}
			got = got[2:]
			if len(got) != tt.wantLen {
				t.Fatalf("len(Chunker%+v.Append(_, 99, text[:%d])) = %d, want %d", tt.c, tt.textLen, len(got), tt.wantLen)
			}
			if n := tt.c.Len(tt.textLen); n != tt.wantLen {
				t.Errorf("Chunker%+v.Len(%d) = %d, want %d", tt.c, tt.textLen, n, tt.wantLen)
			}
			if want := refChain(tt.c.Size, tt.c.MaxChunks, 99, text[:tt.textLen]); tt.wantLen > 0 && !slices.Equal(got, want) {
				t.Errorf("Chunker%+v.Append(_, 99, text[:%d]) = %#x, want %#x", tt.c, tt.textLen, got, want)
			}
		})
	}
}

func TestSeedUnambiguous(t *testing.T) {
	type parts struct{ model, salt, tenant string }
	tests := []struct {
		name string
		a, b parts
		same bool
	}{
		{"split moved model/salt", parts{"ab", "c", ""}, parts{"a", "bc", ""}, false},
		{"split moved salt/tenant", parts{"", "ab", "c"}, parts{"", "a", "bc"}, false},
		{"swapped model/salt", parts{"x", "", ""}, parts{"", "x", ""}, false},
		{"swapped salt/tenant", parts{"", "x", ""}, parts{"", "", "x"}, false},
		{"different model", parts{"llama", "", ""}, parts{"qwen", "", ""}, false},
		{"different salt", parts{"m", "s1", ""}, parts{"m", "s2", ""}, false},
		{"different tenant", parts{"m", "s", "t1"}, parts{"m", "s", "t2"}, false},
		{"equal", parts{"m", "s", "t"}, parts{"m", "s", "t"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Seed([]byte(tt.a.model), []byte(tt.a.salt), []byte(tt.a.tenant))
			b := Seed([]byte(tt.b.model), []byte(tt.b.salt), []byte(tt.b.tenant))
			if (a == b) != tt.same {
				t.Errorf("Seed%q = %#x, Seed%q = %#x, want equal %v", tt.a, a, tt.b, b, tt.same)
			}
		})
	}
	if a, b := Seed(nil, nil, nil), Seed([]byte{}, []byte{}, []byte{}); a != b {
		t.Errorf("Seed(nil, nil, nil) = %#x, Seed(empty, empty, empty) = %#x, want equal", a, b)
	}
}

// TestSeedSeparation checks that the same text under different models, salts
// or tenants shares no hash at all, at any depth.
func TestSeedSeparation(t *testing.T) {
	c := Chunker{Size: 64, MaxChunks: 100}
	text := bytes.Repeat([]byte("system prompt shared by everyone. "), 100)
	seen := map[Hash]string{}
	for _, model := range []string{"", "llama", "qwen"} {
		for _, salt := range []string{"", "salt-a", "salt-b"} {
			for _, tenant := range []string{"", "t1", "t2"} {
				who := fmt.Sprintf("(%q, %q, %q)", model, salt, tenant)
				for i, h := range c.Append(nil, Seed([]byte(model), []byte(salt), []byte(tenant)), text) {
					if other, ok := seen[h]; ok {
						t.Fatalf("chunk %d of Seed%s has hash %#x, also produced under Seed%s", i, who, h, other)
					}
					seen[h] = who
				}
			}
		}
	}
}

func TestChunkerAllocs(t *testing.T) {
	text := bytes.Repeat([]byte{'x'}, 64<<10)
	seed := Seed([]byte("model"), nil, nil)
	c := Chunker{Size: DefaultChunkSize, MaxChunks: DefaultMaxChunks}
	dst := make([]Hash, 0, c.Len(len(text)))
	tests := []struct {
		name string
		fn   func()
	}{
		{"Seed", func() { seed = Seed(text[:8], text[8:20], nil) }},
		{"Append", func() { dst = c.Append(dst[:0], seed, text) }},
		{"Len", func() { _ = c.Len(len(text)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(100, tt.fn); got != 0 {
				t.Errorf("AllocsPerRun(%s) = %v, want 0", tt.name, got)
			}
		})
	}
}

// FuzzChunker checks that Append never panics, matches the written-out
// scheme, and is prefix stable: the hashes of text[:n] are a prefix of the
// hashes of text.
func FuzzChunker(f *testing.F) {
	f.Add(goldenText, uint16(256), uint16(2048), uint16(300), uint64(0))
	f.Add([]byte("hello"), uint16(1), uint16(3), uint16(2), uint64(1))
	f.Add([]byte{}, uint16(0), uint16(0), uint16(0), uint64(7))
	f.Fuzz(func(t *testing.T, text []byte, size, maxChunks, cut uint16, seed uint64) {
		c := Chunker{Size: int(size % 512), MaxChunks: int(maxChunks % 4096)}
		full := c.Append(nil, Hash(seed), text)
		if len(full) != c.Len(len(text)) {
			t.Fatalf("len(Chunker%+v.Append(nil, %#x, text[%d])) = %d, want Len %d", c, seed, len(text), len(full), c.Len(len(text)))
		}
		if c.Size > 0 && c.MaxChunks > 0 {
			if want := refChain(c.Size, c.MaxChunks, Hash(seed), text); !slices.Equal(full, want) {
				t.Fatalf("Chunker%+v.Append(nil, %#x, text[%d]) = %#x, want %#x", c, seed, len(text), full, want)
			}
		}
		n := int(cut)
		if n > len(text) {
			n = len(text)
		}
		part := c.Append(nil, Hash(seed), text[:n])
		if len(part) > len(full) || !slices.Equal(part, full[:len(part)]) {
			t.Fatalf("Chunker%+v.Append(nil, %#x, text[:%d]) = %#x, not a prefix of the hashes of text[%d] %#x", c, seed, n, part, len(text), full)
		}
	})
}
