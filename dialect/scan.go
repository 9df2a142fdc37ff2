package dialect

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
	"unicode/utf8"
)

// This file is the JSON scanner: whitespace, strings (skipped or rendered
// unescaped), numbers and the iterative skipping of whole values. All of it
// works on the body in place with offsets; nothing allocates.
//
// Strings are the hot path (message text is nearly all of a chat body).
// Skipping finds the closing quote with bytes.IndexByte. Rendering is one
// pass over the string, eight bytes at a time, that copies while it looks
// for '"' and '\\' (appendString), so prose with an escape every few dozen
// bytes costs one branch miss per escape rather than two searches and a
// copy call.

// skipWS returns the offset of the first non-whitespace byte at or after i.
func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\n', '\r', '\t':
			i++
		default:
			return i
		}
	}
	return i
}

// shortString is how far string scans look byte by byte before calling
// bytes.IndexByte: 16 bytes covers keys, roles and types (measured: 1 KB
// chat bodies +8%, long strings unaffected).
const shortString = 16

// Three scanners find where a string ends and must agree on it:
// skipString for strings that do not enter the text, appendStringMax for
// those that do, and countString for those that a limited rendering
// measures past its limit (readName uses the last two). They stay
// separate because each is the cheapest way to do its job, and one doing
// all three would make the commonest job pay for the others: skipping
// needs only the end (bytes.IndexByte per quote, then a look at the
// backslashes before it), measuring must also find and validate every
// escape, and rendering copies as it scans, eight bytes at a time.
// Measured on 16 KiB (BenchmarkAppendString, CPU time): skip 0.4 µs with
// or without an escape every 32 bytes, count 0.8 and 5.7 µs, render 6-8
// µs. They share the escape tables and decoding (unescape,
// unicodeEscape); TestAppendStringMatchesReference and FuzzAppendString
// check that they agree on ends and errors (and FuzzCountString, on
// lengths).

// skipString returns the offset just after the string that starts with the
// quote at b[i]. Escapes are not validated here; rendered strings are
// validated by appendString.
func skipString(b []byte, i int) (int, error) {
	end, _, err := skipStringWork(b, i)
	return end, err
}

// skipStringWork is skipString that also returns its work (see
// skipWork): one for each search for a quote, and one for each backslash
// before a quote that it counts.
func skipStringWork(b []byte, i int) (end, work int, err error) {
	// Most strings skipped are short (keys, roles, types): a plain loop
	// beats the call overhead of IndexByte for them.
	for j := i + 1; j < len(b) && j <= i+shortString; j++ {
		if c := b[j]; c == '"' {
			return j + 1, 1, nil
		} else if c == '\\' {
			break
		}
	}
	j := i + 1
	for {
		work++
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return 0, 0, syntaxErr(i, "unterminated string")
		}
		q += j
		// The quote is escaped if an odd number of backslashes precede it.
		k := q - 1
		for k > i && b[k] == '\\' {
			k--
		}
		if work += q - 1 - k; (q-1-k)%2 == 0 {
			return q + 1, work, nil
		}
		j = q + 1
	}
}

// appendString appends the unescaped contents of the string that starts with
// the quote at b[i] to dst. It returns the extended dst and the offset just
// after the closing quote. Invalid escapes are ErrSyntax; lone surrogates
// become U+FFFD (as encoding/json does); raw bytes, valid UTF-8 or not, are
// copied as they are. It may write up to 7 bytes past the returned length,
// within dst's capacity.
//
// One pass: each 8-byte word of the string is stored to dst before it is
// tested for '"' or '\\', and the output advances by the bytes before the
// first one found, so runs between escapes are copied without a call and
// escapes cost one branch miss each. Two-byte escapes are decoded from a
// table and the scan continues; \u escapes take the slow path.
func appendString(dst, b []byte, i int) ([]byte, int, error) {
	d, r, _, err := appendStringMax(dst, b, i, maxInt)
	return d, r, err
}

// maxInt is the largest int, the limit of an unlimited rendering.
const maxInt = int(^uint(0) >> 1)

// appendStringMax is appendString that stops early once dst has reached
// length lim: then it returns more = true and the offset of the first byte
// of the string not rendered, always at the start of a byte or an escape
// (countString can go on from there). It stops between escapes, so it may
// write past lim by the rest of one escape (at most 3 bytes).
func appendStringMax(dst, b []byte, i, lim int) (out []byte, r int, more bool, err error) {
	r, w := i+1, len(dst)
	d := dst[:cap(dst)]
	for {
		if w >= lim {
			return d[:w], r, true, nil
		}
		nr, nw := unescapeRun(d[w:min(len(d), lim)], b[r:])
		r += nr
		w += nw
		if r >= len(b) {
			return d[:w], 0, false, syntaxErr(i, "unterminated string")
		}
		c := b[r]
		if c != '"' && c != '\\' {
			// Fewer than 8 bytes of body or of room (before lim) were
			// left: one byte, growing dst as append does.
			d = append(d[:w], c)
			d = d[:cap(d)]
			r++
			w++
			continue
		}
		if c == '"' {
			return d[:w], r + 1, false, nil
		}
		// A backslash at b[r].
		if r+1 >= len(b) {
			return d[:w], 0, false, syntaxErr(i, "unterminated string")
		}
		if v := unescape[b[r+1]]; v != 0 {
			if w >= len(d) {
				d = slices.Grow(d[:w], 1)
				d = d[:cap(d)]
			}
			d[w] = v
			w++
			r += 2
			continue
		}
		if b[r+1] != 'u' {
			return d[:w], 0, false, escapeErr(b, i, r, "invalid escape")
		}
		ru, next, ok := unicodeEscape(b, r)
		if !ok {
			return d[:w], 0, false, escapeErr(b, i, r, "invalid \\u escape")
		}
		r = next
		d = utf8.AppendRune(d[:w], ru)
		w = len(d)
		d = d[:cap(d)]
	}
}

// unescapeRun unescapes the start of s into d, eight bytes at a time, and
// returns how many bytes it read and wrote. It stops at a '"' or at a
// backslash other than a two-byte escape (so at a \u escape or an invalid
// one), with s[r] that byte, or earlier when fewer than 8 bytes of s or of
// d are left. It may write up to 7 bytes to d past w.
func unescapeRun(d, s []byte) (r, w int) {
	for r+8 <= len(s) && w+8 <= len(d) {
		x := binary.LittleEndian.Uint64(s[r : r+8])
		binary.LittleEndian.PutUint64(d[w:w+8], x)
		m := quoteOrBackslash(x)
		if m == 0 {
			r += 8
			w += 8
			continue
		}
		n := bits.TrailingZeros64(m) >> 3
		r += n
		w += n
		if s[r] == '"' || r+1 >= len(s) {
			return r, w
		}
		v := unescape[s[r+1]]
		if v == 0 {
			return r, w
		}
		d[w] = v
		r += 2
		w++
	}
	return r, w
}

// countString returns what appendString would for the string that starts
// with the quote at b[i], from its byte b[r] on, without writing it: the
// offset just after the closing quote, the number of bytes the unescaped
// contents from b[r] on have, and the same error (offset and message
// included). r is i+1 or an offset where appendStringMax stopped.
//
// It validates every escape, as rendering does, so a limited rendering
// rejects exactly the bodies a whole one rejects. Escape-free runs are
// measured with bytes.IndexByte, so a string costs one search for its
// closing quote and one short search per escape: several times faster
// than unescaping it.
func countString(b []byte, i, r int) (end, n int, err error) {
	q := -1 // the first '"' at or after r, once found
	for {
		if q < r {
			k := bytes.IndexByte(b[r:], '"')
			if k < 0 {
				// With no quote left, every way through the rest of the
				// string ends in appendString's "unterminated string"
				// (escapeErr's first case included).
				return 0, 0, syntaxErr(i, "unterminated string")
			}
			q = r + k
		}
		k := bytes.IndexByte(b[r:q], '\\')
		if k < 0 {
			return q + 1, n + q - r, nil
		}
		k += r
		n += k - r
		// A backslash at b[k], with k < q, so b[k+1] exists.
		if unescape[b[k+1]] != 0 {
			n++
			r = k + 2 // past q if the escape was \": q is searched again
			continue
		}
		if b[k+1] != 'u' {
			return 0, 0, escapeErr(b, i, k, "invalid escape")
		}
		ru, next, ok := unicodeEscape(b, k)
		if !ok {
			return 0, 0, escapeErr(b, i, k, "invalid \\u escape")
		}
		r = next
		n += utf8.RuneLen(ru)
	}
}

// unicodeEscape decodes the \u escape at b[k] (b[k:k+2] is `\u`): the
// rune it stands for, a surrogate pair joined with the \u escape after it
// and a lone surrogate as U+FFFD (as encoding/json does), and the offset
// after it. ok is false if its four hex digits are not.
func unicodeEscape(b []byte, k int) (ru rune, next int, ok bool) {
	if ru, ok = hex4(b, k+2); !ok {
		return 0, 0, false
	}
	next = k + 6
	if !utf16IsSurrogate(ru) {
		return ru, next, true
	}
	if ru < 0xdc00 && next+1 < len(b) && b[next] == '\\' && b[next+1] == 'u' {
		if r2, ok2 := hex4(b, next+2); ok2 && r2 >= 0xdc00 && r2 < 0xe000 {
			return 0x10000 + (ru-0xd800)<<10 + (r2 - 0xdc00), next + 6, true
		}
	}
	return utf8.RuneError, next, true
}

// escapeErr is the error for the invalid escape at b[k] in the string that
// starts at b[i]: "unterminated string" if no quote follows it (as when
// the string's end is found before its escapes are checked), else an
// ErrSyntax at k with msg.
func escapeErr(b []byte, i, k int, msg string) error {
	if bytes.IndexByte(b[k+1:], '"') < 0 {
		return syntaxErr(i, "unterminated string")
	}
	return syntaxErr(k, msg)
}

// unescape maps the byte after a backslash to the byte it stands for, for
// the two-byte escapes; 0 for 'u' and invalid escapes.
var unescape = [256]byte{
	'"': '"', '\\': '\\', '/': '/',
	'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t',
}

// quoteOrBackslash returns a word whose lowest set bit is the high bit of
// the first byte of x (little-endian) that is '"' or '\\', or 0 if there is
// none. Higher bits may be set spuriously (the borrow of the classic
// has-zero-byte test), so only the lowest one is meaningful.
func quoteOrBackslash(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	s := x ^ (lo * '\\')
	return ((q-lo)&^q | (s-lo)&^s) & hi
}

func utf16IsSurrogate(r rune) bool { return r >= 0xd800 && r < 0xe000 }

// hex4 decodes the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// hasEscape reports whether the string value at b[s:e] (quotes included)
// contains a backslash.
func hasEscape(b []byte, s, e int) bool {
	return bytes.IndexByte(b[s+1:e-1], '\\') >= 0
}

// skipValue returns the offset just after the JSON value that starts at b[i]
// (i is at a non-whitespace byte). Containers are skipped iteratively, so
// nesting depth costs no stack. The skip checks what it must to find the end
// of the value: strings are terminated, brackets balance and (for the first
// 64 levels) match in kind. It does not validate scalars, commas or colons
// inside skipped containers: Append validates what it renders, and the
// engine validates the rest.
func skipValue(b []byte, i int) (int, error) {
	end, _, err := skipWork(b, i)
	return end, err
}

// skipWork is skipValue that also returns the work it did, in bytes
// examined one at a time: a container's bytes outside strings, a scalar's
// bytes, and a string's searches for its end (see skipStringWork), so
// that a value skipped again and again can be charged for it (see
// parser.skip).
func skipWork(b []byte, i int) (end, work int, err error) {
	if i >= len(b) {
		return 0, 0, syntaxErr(i, "unexpected end of input")
	}
	switch b[i] {
	case '"':
		return skipStringWork(b, i)
	case '{', '[':
		return skipContainer(b, i)
	default:
		end, err = skipScalar(b, i)
		return end, end - i, err
	}
}

// skipContainer skips the object or array that starts at b[i] and
// returns its work (see skipWork).
func skipContainer(b []byte, i int) (end, work int, err error) {
	start := i
	var kinds uint64 // bit d set: level d is an object (levels < 64)
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			// Most strings in a container are short (keys, small values):
			// skipStringWork's byte loop, here, saves a call for each.
			j, e := i+1, min(len(b), i+1+shortString)
			for j < e && b[j] != '"' && b[j] != '\\' {
				j++
			}
			if j < e && b[j] == '"' {
				i, work = j+1, work+1
				continue
			}
			j, w, err := skipStringWork(b, i)
			if err != nil {
				return 0, 0, err
			}
			i, work = j, work+w
			continue
		case '{':
			if depth < 64 {
				kinds |= 1 << depth
			}
			depth++
		case '[':
			if depth < 64 {
				kinds &^= 1 << depth
			}
			depth++
		case '}', ']':
			depth--
			if depth < 64 && (kinds>>depth&1 == 1) != (b[i] == '}') {
				return 0, 0, syntaxErr(i, "mismatched bracket")
			}
			if depth == 0 {
				return i + 1, work + 1, nil
			}
		}
		i++
		work++
	}
	return 0, 0, syntaxErr(start, "unterminated container")
}

// skipScalar skips a number or a literal (true, false, null) at b[i].
func skipScalar(b []byte, i int) (int, error) {
	switch c := b[i]; {
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		j, _, _, err := scanNumber(b, i)
		return j, err
	}
	return 0, syntaxErr(i, "invalid value")
}

func skipLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, syntaxErr(i, "invalid literal")
	}
	return i + len(lit), nil
}

// scanNumber validates the JSON number at b[i] and returns the offset after
// it. If the number is a non-negative integer without fraction or exponent
// that fits in 32 bits, it also returns its value and ok = true.
func scanNumber(b []byte, i int) (end int, v uint32, ok bool, err error) {
	j := i
	neg := false
	if j < len(b) && b[j] == '-' {
		neg = true
		j++
	}
	if j >= len(b) || b[j] < '0' || b[j] > '9' {
		return 0, 0, false, syntaxErr(i, "invalid number")
	}
	var acc uint64
	big := false
	if b[j] == '0' {
		j++
	} else {
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			acc = acc*10 + uint64(b[j]-'0')
			if acc > 1<<32-1 {
				big = true
				acc = 1 << 32 // stays bounded; only "too big" matters now
			}
			j++
		}
	}
	integer := true
	if j < len(b) && b[j] == '.' {
		integer = false
		j++
		d := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == d {
			return 0, 0, false, syntaxErr(i, "invalid number")
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		integer = false
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		d := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == d {
			return 0, 0, false, syntaxErr(i, "invalid number")
		}
	}
	if integer && !neg && !big {
		return j, uint32(acc), true, nil
	}
	return j, 0, false, nil
}

// nextMember advances over an object member separator. i is just after a
// value inside an object; it returns the offset of the next key's quote and
// more = true, or the offset after the closing brace and more = false.
func nextMember(b []byte, i int) (int, bool, error) {
	i = skipWS(b, i)
	if i >= len(b) {
		return 0, false, syntaxErr(i, "unexpected end of input in object")
	}
	switch b[i] {
	case ',':
		i = skipWS(b, i+1)
		if i >= len(b) || b[i] != '"' {
			return 0, false, syntaxErr(i, "expected object key")
		}
		return i, true, nil
	case '}':
		return i + 1, false, nil
	}
	return 0, false, syntaxErr(i, "expected ',' or '}' in object")
}

// nextElement is nextMember for arrays: it returns the offset of the next
// element and more = true, or the offset after ']' and more = false.
func nextElement(b []byte, i int) (int, bool, error) {
	i = skipWS(b, i)
	if i >= len(b) {
		return 0, false, syntaxErr(i, "unexpected end of input in array")
	}
	switch b[i] {
	case ',':
		i = skipWS(b, i+1)
		if i >= len(b) {
			return 0, false, syntaxErr(i, "unexpected end of input in array")
		}
		return i, true, nil
	case ']':
		return i + 1, false, nil
	}
	return 0, false, syntaxErr(i, "expected ',' or ']' in array")
}

// maxName is the longest name readName unescapes in full: longer than
// every key and type this package compares with.
const maxName = 32

// nameBuf holds a name unescaped by readName: maxName bytes and the 3 an
// escape may write past them.
type nameBuf [maxName + 4]byte

// readName reads a string that is compared with names this package knows
// (an object key, a part or item type) and returns its contents
// unescaped, as a JSON decoder sees them, and the offset after it. A name
// without escapes (nearly all) is returned as b's own bytes, whatever its
// length; one with escapes is unescaped into buf, or returned as nil if
// its unescaped length exceeds maxName (it equals no known name). Its
// errors are appendString's: escapes are validated to the end.
func readName(b []byte, i int, buf *nameBuf) (name []byte, end int, err error) {
	// Names are short and rarely escaped: a byte loop finds the end of
	// most (inlined in the callers).
	j, e := i+1, min(len(b), i+1+shortString)
	for j < e && b[j] != '"' && b[j] != '\\' {
		j++
	}
	if j < e && b[j] == '"' {
		return b[i+1 : j], j + 1, nil
	}
	return readLongName(b, i, buf)
}

// readLongName is readName for a name that is longer than shortString
// bytes or escaped.
func readLongName(b []byte, i int, buf *nameBuf) (name []byte, end int, err error) {
	if j := i + 1 + shortString; j < len(b) && bytes.IndexByte(b[i+1:j], '\\') < 0 {
		// Long and not escaped so far: search the rest as skipString does.
		if q := bytes.IndexByte(b[j:], '"'); q >= 0 {
			if q += j; bytes.IndexByte(b[j:q], '\\') < 0 {
				return b[i+1 : q], q + 1, nil
			}
		}
	}
	// Rare: escapes ("\u0074ype"), or no closing quote (appendStringMax
	// reports it). Past maxName, countString validates the rest.
	name, r, more, err := appendStringMax(buf[:0], b, i, maxName+1)
	if err != nil {
		return nil, 0, err
	}
	if more {
		end, _, err = countString(b, i, r)
		return nil, end, err
	}
	if len(name) > maxName {
		name = nil // it ended exactly at the limit
	}
	return name, r, nil
}

// readKey reads the object key whose quote is at b[i] (see readName) and
// the colon after it. It returns the key and the offset of the value.
func readKey(b []byte, i int, kbuf *nameBuf) (key []byte, vs int, err error) {
	// readName's byte loop, repeated to save a call on every key.
	j, e := i+1, min(len(b), i+1+shortString)
	for j < e && b[j] != '"' && b[j] != '\\' {
		j++
	}
	if j < e && b[j] == '"' {
		key, j = b[i+1:j], j+1
	} else if key, j, err = readLongName(b, i, kbuf); err != nil {
		return nil, 0, err
	}
	j = skipWS(b, j)
	if j >= len(b) || b[j] != ':' {
		return nil, 0, syntaxErr(j, "expected ':' after object key")
	}
	vs = skipWS(b, j+1)
	if vs >= len(b) {
		return nil, 0, syntaxErr(vs, "unexpected end of input")
	}
	return key, vs, nil
}

// member reads one object member whose key starts with the quote at b[i]
// and skips its value. It returns the key (see readKey) and the value's
// span b[vs:ve].
func member(b []byte, i int, kbuf *nameBuf) (key []byte, vs, ve int, err error) {
	if key, vs, err = readKey(b, i, kbuf); err != nil {
		return nil, 0, 0, err
	}
	if ve, err = skipValue(b, vs); err != nil {
		return nil, 0, 0, err
	}
	return key, vs, ve, nil
}

// firstMember checks that b[i] opens an object and returns the offset of
// its first key (more = true) or the offset after "{}" (more = false).
func firstMember(b []byte, i int) (int, bool, error) {
	if i >= len(b) || b[i] != '{' {
		return 0, false, syntaxErr(i, "expected object")
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, false, nil
	}
	if i >= len(b) || b[i] != '"' {
		return 0, false, syntaxErr(i, "expected object key")
	}
	return i, true, nil
}

// firstElement checks that b[i] opens an array and returns the offset of its
// first element (more = true) or the offset after "[]" (more = false).
func firstElement(b []byte, i int) (int, bool, error) {
	if i >= len(b) || b[i] != '[' {
		return 0, false, syntaxErr(i, "expected array")
	}
	i = skipWS(b, i+1)
	if i >= len(b) {
		return 0, false, syntaxErr(i, "unexpected end of input in array")
	}
	if b[i] == ']' {
		return i + 1, false, nil
	}
	return i, true, nil
}
