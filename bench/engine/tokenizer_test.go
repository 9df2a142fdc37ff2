package engine

import (
	"slices"
	"strings"
	"testing"
)

func TestTokenize(t *testing.T) {
	tests := []struct {
		text   string
		pieces []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"internationalization", []string{"intern", "ationa", "lizati", "on"}},
		{"  indented", []string{" ", " inden", "ted"}},
		{"x\n\ny", []string{"x", "\n\n", "y"}},
		{"x \n y", []string{"x", " \n", " y"}},
		{"12345 67", []string{"123", "45", " ", "67"}},
		{"a, b.", []string{"a", ",", " b", "."}},
		{"héllo wörld", []string{"héllo", " wörl", "d"}},
		{"<|im_start|>user\nhi<|im_end|>\n", []string{tokIMStart, "user", "\n", "hi", tokIMEnd, "\n"}},
		{"a<|b", []string{"a", "<|", "b"}},
		{"", nil},
	}
	for _, tt := range tests {
		var want []uint32
		for _, p := range tt.pieces {
			want = append(want, pieceID(p))
		}
		if got := tokenize(nil, tt.text); !slices.Equal(got, want) {
			t.Errorf("tokenize(%q) = %v, want %v (%q)", tt.text, got, want, tt.pieces)
		}
	}
}

func TestTokenizeBytesPerToken(t *testing.T) {
	// The opening of "A Tale of Two Cities"; Llama-3's tokenizer gives
	// ~4.2 bytes per token on English prose.
	text := `It was the best of times, it was the worst of times, it was the age of
wisdom, it was the age of foolishness, it was the epoch of belief, it was the
epoch of incredulity, it was the season of Light, it was the season of
Darkness, it was the spring of hope, it was the winter of despair, we had
everything before us, we had nothing before us, we were all going direct to
Heaven, we were all going direct the other way.`
	n := len(tokenize(nil, text))
	bpt := float64(len(text)) / float64(n)
	t.Logf("%d bytes, %d tokens: %.2f bytes per token", len(text), n, bpt)
	if bpt < 3 || bpt > 5 {
		t.Errorf("%.2f bytes per token, want 3..5", bpt)
	}
}

// TestOutputRoundTrip checks that generated text tokenizes back to the
// generated tokens, alone and inside the next turn's chat template, so a
// follow-up turn hits the cached answer.
func TestOutputRoundTrip(t *testing.T) {
	for seed := range uint64(20) {
		for _, lead := range []bool{false, true} {
			var text strings.Builder
			var want []uint32
			for i := range 50 {
				text.WriteString(outputText(seed, i, lead))
				want = append(want, outputToken(seed, i, lead))
			}
			if got := tokenize(nil, text.String()); !slices.Equal(got, want) {
				t.Fatalf("seed %d lead %v: tokenize(%q) = %v, want %v", seed, lead, text.String(), got, want)
			}
			prompt := "<|im_start|>assistant\n"
			in := tokenize(nil, prompt+text.String()+"<|im_end|>\n")
			if !slices.Equal(in[:len(in)-2], append(tokenize(nil, prompt), want...)) {
				t.Fatalf("seed %d lead %v: answer in a template does not tokenize to prompt + answer", seed, lead)
			}
		}
	}
}

func FuzzTokenizePrefix(f *testing.F) {
	for _, s := range []string{"Hello world", "x  ", "12345", "a, b. ", "naïve café", "\n\n  x", "<|im_start|>"} {
		f.Add(s, " more text")
		f.Add(s, "9")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ta, tab := tokenize(nil, a), tokenize(nil, a+b)
		if !slices.Equal(tokenize(nil, a), ta) {
			t.Fatalf("tokenize(%q) not deterministic", a)
		}
		if strings.Contains(a+b, "<|") {
			return // a marker spanning the boundary changes more than the last piece
		}
		// Only the last piece of a can change when text is appended.
		if len(ta) > 0 && !slices.Equal(ta[:len(ta)-1], tab[:min(len(ta)-1, len(tab))]) {
			t.Fatalf("tokenize(%q) = %v is not a prefix, but for its last token, of tokenize(%q) = %v", a, ta, a+b, tab)
		}
	})
}
