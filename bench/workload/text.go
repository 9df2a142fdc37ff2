package workload

import "strings"

// Synthetic text is made of three-letter pseudo-words (consonant, vowel,
// consonant) separated by single spaces. The simulated engine's tokenizer
// (bench/engine), like a byte-level BPE, makes a short word with its leading
// space one token, so n words are n tokens and 4n-1 bytes: the ~4 bytes per
// token of English under Llama-3's tokenizer, and an exact token count for
// the workloads' length parameters. Text is a pure function of its seed, so
// equal seeds give byte-identical prompts and therefore identical KV blocks.

const (
	consonants = "bcdfghjklmnprstvwxz"
	vowels     = "aeiou"
)

// vocab holds the pseudo-words, 19 x 5 x 19 = 1805 of them.
var vocab = func() []string {
	v := make([]string, 0, len(consonants)*len(vowels)*len(consonants))
	for _, a := range consonants {
		for _, b := range vowels {
			for _, c := range consonants {
				v = append(v, string([]rune{a, b, c}))
			}
		}
	}
	return v
}()

// BytesPerToken is the bytes of synthetic text per token of the simulated
// engine's tokenizer.
const BytesPerToken = 4

// appendWords appends n pseudo-words drawn from r to b, separated by single
// spaces, with no leading space.
func appendWords(b *strings.Builder, r *rng, n int) {
	b.Grow(n * BytesPerToken)
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocab[r.intn(len(vocab))])
	}
}

// Text returns n tokens of synthetic text determined by seed.
func Text(n int, seed ...uint64) string {
	var b strings.Builder
	appendWords(&b, newRNG(seed...), n)
	return b.String()
}
