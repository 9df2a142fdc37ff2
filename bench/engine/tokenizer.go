package engine

import "strings"

// The tokenizer approximates a byte-level BPE tokenizer (Llama-3, Qwen,
// GPT-4) in two stages, like the real ones:
//
//  1. Special tokens (the chat-template markers) are matched literally and
//     become one token each.
//  2. The text between them is pre-tokenized the way the GPT-4/Llama-3
//     regex does it: a word is a run of letters with at most one leading
//     space; a number is a run of at most three digits; punctuation is a
//     run of other symbols with at most one leading space; whitespace is a
//     run of its own, except that a final space before a word or
//     punctuation belongs to that word. Each pre-token is then cut into
//     pieces of at most maxPieceBytes (6) bytes, and a piece's token id is
//     the 32-bit FNV-1a hash of its bytes.
//
// The cut into 6-byte pieces stands in for BPE merges: words of up to five
// letters with their leading space (" the", " worst") are one token, as the
// common ones are in a 128k vocabulary, and longer words two or three
// (" foolishness": " fooli" "shness"; Llama-3: " foolish" "ness"). English
// prose comes out at 3.5-4 bytes per token (the opening of "A Tale of Two
// Cities": 3.5; Llama-3 ~4.2, OpenAI's rule of thumb 4). What
// matters for prefix caching is preserved exactly: tokenization is a pure
// function of the text, and a text's token sequence is a prefix of the token
// sequence of any extension of that text, except for its last pre-token
// (real BPE has the same boundary effect). Identical text prefixes therefore
// give identical token prefixes, and identical block hashes.

// maxPieceBytes is the longest token, in bytes, outside special tokens.
const maxPieceBytes = 6

// Chat-template markers, one token each (ChatML, as used by Qwen and many
// others; a Llama-3 template has the same structure with other names).
const (
	tokIMStart   = "<|im_start|>"
	tokIMEnd     = "<|im_end|>"
	tokEndOfText = "<|endoftext|>"
)

// specialTokens are matched literally by tokenize.
var specialTokens = [...]string{tokIMStart, tokIMEnd, tokEndOfText}

// byte classes of the pre-tokenizer.
const (
	classOther = iota // punctuation and symbols
	classLetter
	classDigit
	classSpace
)

// byteClass classifies b. Bytes of multi-byte UTF-8 sequences count as
// letters, so non-Latin words stay together as they do in BPE.
func byteClass(b byte) int {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= 0x80:
		return classLetter
	case b >= '0' && b <= '9':
		return classDigit
	case b == ' ', b == '\t', b == '\n', b == '\r', b == '\v', b == '\f':
		return classSpace
	}
	return classOther
}

// tokenize appends the token ids of text to dst.
func tokenize(dst []uint32, text string) []uint32 {
	for len(text) > 0 {
		i := strings.Index(text, "<|")
		if i < 0 {
			return tokenizeText(dst, text)
		}
		dst = tokenizeText(dst, text[:i])
		text = text[i:]
		matched := false
		for _, sp := range specialTokens {
			if strings.HasPrefix(text, sp) {
				dst = append(dst, pieceID(sp))
				text = text[len(sp):]
				matched = true
				break
			}
		}
		if !matched {
			// Not a marker: "<|" is ordinary punctuation. Find the end of
			// the punctuation run it starts so that tokenizeText sees it
			// whole.
			j := 2
			for j < len(text) && byteClass(text[j]) == classOther && !strings.HasPrefix(text[j:], "<|") {
				j++
			}
			dst = tokenizeText(dst, text[:j])
			text = text[j:]
		}
	}
	return dst
}

// tokenizeText appends the tokens of text, which holds no special token.
func tokenizeText(dst []uint32, s string) []uint32 {
	n := len(s)
	for i := 0; i < n; {
		j := i
		c := byteClass(s[i])
		switch {
		case s[i] == ' ' && i+1 < n && (byteClass(s[i+1]) == classLetter || byteClass(s[i+1]) == classOther):
			// A word or punctuation run with its leading space.
			c = byteClass(s[i+1])
			j = i + 2
			for j < n && byteClass(s[j]) == c {
				j++
			}
		case c == classLetter || c == classOther:
			for j < n && byteClass(s[j]) == c {
				j++
			}
		case c == classDigit:
			for j < n && j-i < 3 && byteClass(s[j]) == classDigit {
				j++
			}
		default: // whitespace
			for j < n && byteClass(s[j]) == classSpace {
				j++
			}
			if j < n && j-1 > i && s[j-1] == ' ' && byteClass(s[j]) != classDigit {
				j-- // the last space starts the next word
			}
		}
		for k := i; k < j; k += maxPieceBytes {
			dst = append(dst, pieceID(s[k:min(k+maxPieceBytes, j)]))
		}
		i = j
	}
	return dst
}

// pieceID is the token id of a piece: its 32-bit FNV-1a hash.
func pieceID(piece string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(piece); i++ {
		h ^= uint32(piece[i])
		h *= 16777619
	}
	return h
}

// outputWords are the words of generated text. Each is at most three bytes,
// so with its leading space it is a single token: generated text tokenizes
// back to exactly the generated tokens, and a follow-up turn that quotes the
// answer hits the answer's cached blocks as it would on a real engine.
var outputWords = [...]string{
	"the", "of", "and", "to", "in", "is", "it", "for", "on", "was",
	"as", "at", "by", "an", "be", "or", "are", "not", "but", "can",
	"all", "one", "new", "may", "out", "use", "has", "its", "two", "any",
	"how", "our", "who", "now", "get", "way", "day", "see", "set", "run",
	"key", "map", "end", "top", "few", "old", "big", "low", "far", "own",
	"yes", "why", "let", "put", "say", "try", "ask", "add", "lot", "fit",
	"hot", "red", "sun", "sky",
}

// outputText returns the text of the i-th generated token of a request whose
// generation seed is seed. The first token has no leading space unless
// leadSpace is set (completions continue the prompt's text; chat answers
// start a message).
func outputText(seed uint64, i int, leadSpace bool) string {
	w := outputWords[mix64(seed+uint64(i)*0x9e3779b97f4a7c15)%uint64(len(outputWords))]
	if i == 0 && !leadSpace {
		return w
	}
	return " " + w
}

// outputToken returns the token id of outputText(seed, i, leadSpace).
func outputToken(seed uint64, i int, leadSpace bool) uint32 {
	return pieceID(outputText(seed, i, leadSpace))
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

// chainHash is the hash of a block of tokens whose preceding blocks hash to
// parent, as vLLM's hash_block_tokens(parent_hash, token_ids). It is also
// used over a partial block to derive a request's generation seed.
func chainHash(parent uint64, tokens []uint32) uint64 {
	h := mix64(parent ^ 0x243f6a8885a308d3)
	for _, t := range tokens {
		h = (h ^ uint64(t)) * 0x100000001b3
		h ^= h >> 32
	}
	return mix64(h ^ uint64(len(tokens)))
}

// saltSeed is the parent hash of a sequence's first block: requests with
// different cache salts (vLLM's cache_salt) never share cached blocks.
func saltSeed(salt string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(salt); i++ {
		h ^= uint64(salt[i])
		h *= 1099511628211
	}
	return mix64(h)
}
