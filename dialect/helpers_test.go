package dialect

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Helpers that spell expected routing text (see the package doc).

func msg(role string) string { return "\x1e" + role + "\x1f" }

func toolsSec(raw string) string { return "\x1ctools\x1f" + raw }

func le32(n int) string { return string(binary.LittleEndian.AppendUint32(nil, uint32(n))) }

func part(label, payload string) string {
	return "\x1d" + label + "\x1f" + le32(len(payload)) + payload
}

func digest(s string) string {
	return string(binary.LittleEndian.AppendUint64(nil, xxh3.HashString(s)))
}

func image(urlOrData string) string { return part("image", digest(urlOrData)) }

func toolCall(name, args string) string { return part("tool_call", name+"\x1f"+args) }

func tokens(ids ...uint32) string {
	b := []byte{0x1a}
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	return string(b)
}

// membersDigest is the documented digest of an object's members, given as
// key and raw JSON value pairs.
func membersDigest(kv ...string) string {
	var h uint64
	for i := 0; i+1 < len(kv); i += 2 {
		h += xxh3.HashSeed([]byte(kv[i+1]), xxh3.HashString(kv[i]))
	}
	return string(binary.LittleEndian.AppendUint64(nil, h))
}

// A small JSON writer for generated bodies: ordered objects and a choice of
// string escaping, so tests can serialise one request several ways.

type kv struct {
	k string
	v any
}

type obj []kv // an object with members in this order

type arr []any

type rawJSON string // written as is

// style is one way to serialise JSON.
type style struct {
	asciiOnly   bool // write non-ASCII as \uXXXX (surrogate pairs above the BMP)
	escapeSlash bool // write "/" as "\/"
	spaces      bool // ", " and ": " between tokens
}

func (st style) encode(v any) []byte { return st.append(nil, v) }

func (st style) append(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, v)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case uint32:
		return strconv.AppendUint(b, uint64(v), 10)
	case float64:
		return strconv.AppendFloat(b, v, 'g', -1, 64)
	case string:
		return st.appendString(b, v)
	case rawJSON:
		return append(b, v...)
	case []uint32:
		b = append(b, '[')
		for i, id := range v {
			if i > 0 {
				b = st.comma(b)
			}
			b = strconv.AppendUint(b, uint64(id), 10)
		}
		return append(b, ']')
	case arr:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = st.comma(b)
			}
			b = st.append(b, e)
		}
		return append(b, ']')
	case obj:
		b = append(b, '{')
		for i, m := range v {
			if i > 0 {
				b = st.comma(b)
			}
			b = st.appendString(b, m.k)
			b = append(b, ':')
			if st.spaces {
				b = append(b, ' ')
			}
			b = st.append(b, m.v)
		}
		return append(b, '}')
	}
	panic("style.append: unsupported type")
}

func (st style) comma(b []byte) []byte {
	if st.spaces {
		return append(b, ", "...)
	}
	return append(b, ',')
}

func (st style) appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '/' && st.escapeSlash:
			b = append(b, `\/`...)
		case r < 0x20 || (st.asciiOnly && r >= 0x7f):
			if r >= 0x10000 {
				r -= 0x10000
				hi, lo := 0xd800+(r>>10), 0xdc00+(r&0x3ff)
				b = append(b, '\\', 'u', hex[hi>>12], hex[hi>>8&15], hex[hi>>4&15], hex[hi&15])
				b = append(b, '\\', 'u', hex[lo>>12], hex[lo>>8&15], hex[lo>>4&15], hex[lo&15])
				continue
			}
			b = append(b, '\\', 'u', hex[r>>12], hex[r>>8&15], hex[r>>4&15], hex[r&15])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

// styles are the serialisations the tests try: Python's json.dumps
// defaults (", ", ": ", ASCII only), JavaScript's JSON.stringify, and a
// PHP-like one that escapes slashes.
var styles = []style{
	{asciiOnly: true, spaces: true},
	{},
	{escapeSlash: true, asciiOnly: true},
}

// words is a vocabulary for generated prompts: English, some code-ish
// tokens and some non-ASCII (accents, CJK, an emoji), and characters that
// need escaping.
var words = strings.Fields(`the of and to in is that for it as with was on be by this are
from at or an which have not has but were they their one all been can more
model request cache prefix token server engine replica latency throughput
function return value error context window attention memory batch
café naïve résumé Zürich 東京 データ 😀 "quoted" C:\path a/b/c tab	x
fn() {x: 1} <html> &amp; 100% $HOME`)

// sentence returns n random words, with a newline now and then.
func sentence(r *rand.Rand, n int) string {
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			if r.IntN(12) == 0 {
				sb.WriteString("\n")
			} else {
				sb.WriteByte(' ')
			}
		}
		sb.WriteString(words[r.IntN(len(words))])
	}
	return sb.String()
}
