package dialect

import (
	"strings"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/internal/cputime"
)

// Crafted bodies: shapes chosen, by reading the renderer, to cost the most
// per byte of body, next to the plain string every parser does fastest.
// BenchmarkAdversarial reports each as MB/s and ns/MiB (thread CPU time),
// with Append and with AppendLimit at 512 KiB of text (the module's
// default max_chunks x chunk_size), so the threat model can quote the
// worst case per MiB of body next to the plain one.

// fill returns head, then unit repeated (joined by sep) until the body
// has about size bytes, then tail.
func fill(head, unit, sep, tail string, size int) []byte {
	n := max(1, (size-len(head)-len(tail))/(len(unit)+len(sep)))
	var sb strings.Builder
	sb.Grow(len(head) + n*(len(unit)+len(sep)) + len(tail))
	sb.WriteString(head)
	for k := range n {
		if k > 0 {
			sb.WriteString(sep)
		}
		sb.WriteString(unit)
	}
	sb.WriteString(tail)
	return []byte(sb.String())
}

// manyMembers returns n object members "k":0 joined by commas.
func manyMembers(n int) string {
	return strings.TrimSuffix(strings.Repeat(`"k":0,`, n), ",")
}

// In a user message's content array, and in a top-level object.
const (
	partsHead = `{"model":"m","messages":[{"role":"user","content":[`
	partsTail = `]}]}`
	topHead   = `{"model":"m",`
)

// adversarialShapes are the crafted bodies, by the code they stress.
var adversarialShapes = []struct {
	name string
	gen  func(size int) []byte
}{
	// The baselines: one plain string, rendered.
	{"plain_prompt", func(n int) []byte { return fill(`{"model":"m","prompt":"`, "x", "", `"}`, n) }},
	{"plain_content", func(n int) []byte {
		return fill(`{"model":"m","messages":[{"role":"user","content":"`, "x", "", `"}]}`, n)
	}},

	// Objects whose members are examined one by one.
	{"image_source_members", func(n int) []byte {
		return fill(partsHead, `{"type":"image","source":{`+manyMembers(1000)+`}}`, ",", partsTail, n)
	}},
	{"image_url_members", func(n int) []byte {
		return fill(partsHead, `{"type":"image_url","image_url":{`+manyMembers(1000)+`}}`, ",", partsTail, n)
	}},
	{"unknown_part_members", func(n int) []byte {
		return fill(partsHead, `{"type":"x",`+manyMembers(1000)+`}`, ",", partsTail, n)
	}},
	{"text_part_members", func(n int) []byte {
		return fill(partsHead, `{"type":"text","text":"",`+manyMembers(1000)+`}`, ",", partsTail, n)
	}},
	{"message_members", func(n int) []byte {
		return fill(`{"model":"m","messages":[`, `{"role":"user","content":"",`+manyMembers(1000)+`}`, ",", `]}`, n)
	}},
	{"item_members", func(n int) []byte {
		return fill(`{"model":"m","input":[`, `{"type":"x",`+manyMembers(1000)+`}`, ",", `]}`, n)
	}},
	{"top_members", func(n int) []byte { return fill(topHead, `"k":0`, ",", `,"prompt":"x"}`, n) }},

	// Many small things, each rendered.
	{"empty_parts", func(n int) []byte { return fill(partsHead, `{}`, ",", partsTail, n) }},
	{"tiny_text_parts", func(n int) []byte { return fill(partsHead, `{"type":"text","text":""}`, ",", partsTail, n) }},
	{"tiny_strings", func(n int) []byte { return fill(partsHead, `""`, ",", partsTail, n) }},
	{"tiny_messages", func(n int) []byte {
		return fill(`{"model":"m","messages":[`, `{"role":"user","content":""}`, ",", `]}`, n)
	}},
	{"tiny_images", func(n int) []byte {
		return fill(partsHead, `{"type":"image_url","image_url":""}`, ",", partsTail, n)
	}},
	{"tiny_tool_calls", func(n int) []byte {
		return fill(`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[`, `{"function":{}}`, ",", `]}]}`, n)
	}},
	{"tiny_tool_uses", func(n int) []byte {
		return fill(partsHead, `{"type":"tool_use","input":{}}`, ",", partsTail, n)
	}},
	{"tiny_tool_results", func(n int) []byte {
		return fill(partsHead, `{"type":"tool_result","content":[{}]}`, ",", partsTail, n)
	}},
	{"empty_items", func(n int) []byte { return fill(`{"model":"m","input":[`, `{}`, ",", `]}`, n) }},
	{"token_ids", func(n int) []byte { return fill(`{"model":"m","prompt":[`, `1`, ",", `]}`, n) }},
	{"token_batches", func(n int) []byte { return fill(`{"model":"m","prompt":[`, `[1]`, ",", `]}`, n) }},

	// One value scanned again and again: a duplicate role makes the
	// message render again from its spans, a duplicate type does the same
	// to the tool result in it, and the unknown part in that is skipped
	// and then digested, so each byte of the nested arrays is read 8 times.
	{"revisits", func(n int) []byte {
		w := strings.Repeat("[", 500) + strings.Repeat("]", 500)
		np := `{"type":"x","k":` + w + `}`
		tr := `{"type":"tool_result","content":[` + np + `],"type":"tool_result"}`
		return fill(`{"model":"m","messages":[`, `{"role":"user","content":[`+tr+`],"role":"user"}`, ",", `]}`, n)
	}},

	// The same nesting with keys in sorted order (as Go maps and
	// json.dumps(sort_keys=True) write them) and no duplicates: each
	// level skips its value before rendering it, 4 reads of the arrays.
	{"sorted_nesting", func(n int) []byte {
		w := strings.Repeat("[", 500) + strings.Repeat("]", 500)
		np := `{"k":` + w + `,"type":"x"}`
		tr := `{"content":[` + np + `],"type":"tool_result"}`
		return fill(`{"model":"m","messages":[`, `{"content":[`+tr+`],"role":"user"}`, ",", `]}`, n)
	}},

	// Escapes, rendered and skipped.
	{"escapes_n", func(n int) []byte { return fill(`{"model":"m","prompt":"`, `\n`, "", `"}`, n) }},
	{"escapes_u", func(n int) []byte { return fill(`{"model":"m","prompt":"`, `\u00e9`, "", `"}`, n) }},
	{"escapes_pair", func(n int) []byte { return fill(`{"model":"m","prompt":"`, `\ud83d\ude00`, "", `"}`, n) }},
	{"escapes_quote", func(n int) []byte { return fill(`{"model":"m","prompt":"`, `\"`, "", `"}`, n) }},
	{"escapes_quote_skipped", func(n int) []byte { return fill(`{"prompt":"x","metadata":"`, `\"`, "", `"}`, n) }},

	// Values skipped whole.
	{"skip_nesting", func(n int) []byte {
		return fill(`{"prompt":"x","metadata":`, "[", "", "", n/2) // then as many ']'
	}},
	{"skip_numbers", func(n int) []byte { return fill(`{"prompt":"x","metadata":[`, `0`, ",", `]}`, n) }},
	{"skip_strings", func(n int) []byte { return fill(`{"prompt":"x","metadata":[`, `""`, ",", `]}`, n) }},
	{"skip_objects", func(n int) []byte { return fill(`{"prompt":"x","metadata":[`, `{}`, ",", `]}`, n) }},
	{"long_key", func(n int) []byte { return fill(`{"prompt":"x","`, `a`, "", `":0}`, n) }},
	{"long_escaped_key", func(n int) []byte { return fill(`{"prompt":"x","`, `\u0061`, "", `":0}`, n) }},
}

// adversarialBody returns shape's body of about size bytes (skip_nesting
// closes its brackets).
func adversarialBody(gen func(int) []byte, name string, size int) []byte {
	body := gen(size)
	if name == "skip_nesting" {
		depth := len(body) - len(`{"prompt":"x","metadata":`)
		body = append(body, strings.Repeat("]", depth)+"}"...)
	}
	return body
}

func BenchmarkAdversarial(b *testing.B) {
	const size = 4 << 20
	for _, s := range adversarialShapes {
		body := adversarialBody(s.gen, s.name, size)
		_, _, want := Append(nil, body) // top_members is rejected: its cost is that of finding out
		if want != nil && s.name != "top_members" {
			b.Fatalf("Append(%s) error: %v", s.name, want)
		}
		for _, l := range []struct {
			name  string
			limit int
		}{{"all", -1}, {"512KiB", 512 << 10}} {
			b.Run(s.name+"/"+l.name, func(b *testing.B) {
				buf := make([]byte, 0, 6*len(body))
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				clk := cputime.Start()
				t0 := cputime.Thread()
				for b.Loop() {
					if _, _, err := AppendLimit(buf[:0], body, l.limit); (err == nil) != (want == nil) {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cputime.Thread()-t0)/float64(b.N)*(1<<20)/float64(len(body)), "cpu-ns/MiB")
				clk.Report(b)
			})
		}
	}
}
