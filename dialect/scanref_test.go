package dialect

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// appendStringRef is appendString as it was before the one-pass scanner
// (bytes.IndexByte for the quote, then for each backslash up to it): the
// reference the scanner must agree with, output and errors alike.
func appendStringRef(dst, b []byte, i int) ([]byte, int, error) {
	for j := i + 1; j < len(b) && j <= i+shortString; j++ {
		if c := b[j]; c == '"' {
			return append(dst, b[i+1:j]...), j + 1, nil
		} else if c == '\\' {
			break
		}
	}
	j := i + 1
	q := bytes.IndexByte(b[j:], '"')
	if q < 0 {
		return dst, 0, syntaxErr(i, "unterminated string")
	}
	q += j
	for {
		k := bytes.IndexByte(b[j:q], '\\')
		if k < 0 {
			return append(dst, b[j:q]...), q + 1, nil
		}
		k += j
		dst = append(dst, b[j:k]...)
		if k+1 >= len(b) {
			return dst, 0, syntaxErr(i, "unterminated string")
		}
		switch c := b[k+1]; c {
		case '"', '\\', '/':
			dst = append(dst, c)
			j = k + 2
		case 'n':
			dst = append(dst, '\n')
			j = k + 2
		case 't':
			dst = append(dst, '\t')
			j = k + 2
		case 'r':
			dst = append(dst, '\r')
			j = k + 2
		case 'b':
			dst = append(dst, '\b')
			j = k + 2
		case 'f':
			dst = append(dst, '\f')
			j = k + 2
		case 'u':
			r, ok := hex4(b, k+2)
			if !ok {
				return dst, 0, syntaxErr(k, "invalid \\u escape")
			}
			j = k + 6
			if utf16IsSurrogate(r) {
				r2, ok2 := rune(-1), false
				if j+1 < len(b) && b[j] == '\\' && b[j+1] == 'u' {
					r2, ok2 = hex4(b, j+2)
				}
				if ok2 && r < 0xdc00 && r2 >= 0xdc00 && r2 < 0xe000 {
					r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
					j += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, 0, syntaxErr(k, "invalid escape")
		}
		if j > q {
			// The escape consumed the quote we had found (\" or a \u
			// sequence running past it): find the next one.
			n := bytes.IndexByte(b[j:], '"')
			if n < 0 {
				return dst, 0, syntaxErr(i, "unterminated string")
			}
			q = j + n
		}
	}
}

// checkAppendString compares appendString with appendStringRef on the
// string starting at b[i], with dst of several capacities (the scanner
// takes its byte-by-byte path when dst is short of room).
func checkAppendString(t *testing.T, b []byte, i int) {
	t.Helper()
	want, wantEnd, wantErr := appendStringRef([]byte("pre"), b, i)
	for _, room := range []int{0, 1, 7, 8, 9, 64, len(want) - 3, len(b) + 8} {
		dst := append(make([]byte, 0, 3+room), "pre"...)
		got, end, err := appendString(dst, b, i)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || (err == nil && (end != wantEnd || !bytes.Equal(got, want))) {
			t.Fatalf("appendString(%q, %d) with room %d = %q, %d, %v, want %q, %d, %v", b, i, room, got, end, err, want, wantEnd, wantErr)
		}
		if err == nil && len(got) <= cap(dst) && &got[:1][0] != &dst[:1][0] {
			t.Fatalf("appendString(%q, %d) with room %d for %d bytes reallocated dst", b, i, room, len(got)-3)
		}
		if err != nil && !errors.Is(err, ErrSyntax) {
			t.Fatalf("appendString(%q, %d) error %v, want ErrSyntax", b, i, err)
		}
	}
}

// checkSkipString checks that skipString agrees with appendString on where
// the string at b[i] ends: where appendString renders it, skipString finds
// the same end; where appendString finds no end ("unterminated string"),
// neither does skipString; and skipString rejects only strings that
// appendString rejects. (skipString does not validate escapes, so it may
// find an end where appendString rejects an escape, or no end where
// appendString stops at an invalid escape first.)
func checkSkipString(t *testing.T, b []byte, i int) {
	t.Helper()
	_, wantEnd, wantErr := appendString(nil, b, i)
	end, err := skipString(b, i)
	unterminated := func(err error) bool { return err != nil && strings.HasSuffix(err.Error(), "unterminated string") }
	switch {
	case wantErr == nil && (err != nil || end != wantEnd),
		unterminated(wantErr) && fmt.Sprint(err) != fmt.Sprint(wantErr),
		err != nil && wantErr == nil:
		t.Fatalf("skipString(%q, %d) = %d, %v; appendString ends at %d, %v", b, i, end, err, wantEnd, wantErr)
	}
}

// checkReadName compares readName with appendString on the string at
// b[i]: the same end and error, and the same contents unless they are
// escaped and longer than maxName (then nil).
func checkReadName(t *testing.T, b []byte, i int) {
	t.Helper()
	want, wantEnd, wantErr := appendString(nil, b, i)
	var buf nameBuf
	got, end, err := readName(b, i, &buf)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("readName(%q, %d) error %v, appendString's %v", b, i, err, wantErr)
	}
	if err != nil {
		return
	}
	escaped := bytes.IndexByte(b[i+1:wantEnd-1], '\\') >= 0
	if end != wantEnd || (got == nil) != (escaped && len(want) > maxName) || got != nil && !bytes.Equal(got, want) {
		t.Fatalf("readName(%q, %d) = %q, %d, want %q, %d (nil if escaped and longer than %d)", b, i, got, end, want, wantEnd, maxName)
	}
}

func TestAppendStringMatchesReference(t *testing.T) {
	pieces := []string{"a", "bcdefgh", "\\\\", "\\\"", "\\n", "\\u00e9", "\\ud83d\\ude00", "\\ud83d", "\\ude00",
		"\\u12", "\\x", "\\", "\"", "\xff", "é", "        ", "\\u00", "\\uzzzz", "\\/"}
	for n := range 4000 {
		var s []byte
		s = append(s, '"')
		for k, x := 0, n; k < 1+n%9; k++ {
			s = append(s, pieces[x%len(pieces)]...)
			x = x*7 + k + 3
		}
		checkAppendString(t, s, 0)
		checkAppendString(t, append([]byte("xx"), s...), 2)
		checkReadName(t, s, 0)
		checkSkipString(t, s, 0)
		checkSkipString(t, append([]byte("xx"), s...), 2)
	}
	// Names around maxName, with an escape of each width anywhere in them.
	for n := maxName - 4; n <= maxName+4; n++ {
		for _, esc := range []string{`\n`, `\u00e9`, `\u6771`, `\ud83d\ude00`} {
			for at := 0; at <= n; at++ {
				s := `"` + strings.Repeat("a", at) + esc + strings.Repeat("b", n-at) + `"`
				checkReadName(t, []byte(s), 0)
				checkReadName(t, []byte(s[:len(s)-1]), 0) // unterminated
			}
		}
		checkReadName(t, []byte(`"`+strings.Repeat("c", n)+`"`), 0)
	}
}

// FuzzAppendString checks that appendString renders every string, and
// rejects every invalid one, exactly as appendStringRef does, and that
// readName and skipString agree with it.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\"b\\c\/d\be\ff\ng\rh\ti"`, `"\ud83d\ude00x"`, `"\ud83d\u0041"`, `"\x"`, `"\u12"`, `"a\"b`, `"` + "\xff" + `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			b = append([]byte{'"'}, b...)
		}
		checkAppendString(t, b, 0)
		checkReadName(t, b, 0)
		checkSkipString(t, b, 0)
	})
}
