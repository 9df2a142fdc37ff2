package dialect

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// checkLimit checks AppendLimit(dst, body, limit) against Append(body):
//
//   - the appended bytes are the first min(limit, len) bytes of Append's
//     text;
//   - Kind, Model and CacheSalt are Append's, and Placement is Append's
//     clamped to the appended length;
//   - TextLen is at least Append's length, at most that plus 5 per
//     backslash of the body (strings past the limit count their raw
//     bytes), and
//     exactly Append's if the limit holds the whole text or the body has
//     no backslash;
//   - the error is Append's, offset and message included, unless Append's
//     is an invalid escape (in a string that AppendLimit skips): then
//     AppendLimit may succeed or meet a later error.
func checkLimit(t *testing.T, body []byte, limit int) {
	t.Helper()
	want, wreq, werr := Append(nil, body)
	dst := []byte("dst-prefix")
	orig := bytes.Clone(body)
	got, req, err := AppendLimit(dst, body, limit)
	short := body[:min(len(body), 80)]
	if !bytes.Equal(body, orig) {
		t.Fatalf("AppendLimit(%q..., %d) modified its input", short, limit)
	}
	if fmt.Sprint(err) != fmt.Sprint(werr) {
		if werr == nil || !strings.HasSuffix(werr.Error(), "escape") {
			t.Fatalf("AppendLimit(%q..., %d) error = %v, Append's = %v", short, limit, err, werr)
		}
		if err == nil && limit >= 0 && len(got)-len("dst-prefix") > limit {
			t.Fatalf("AppendLimit(%q..., %d) appended %d bytes, more than the limit", short, limit, len(got)-len("dst-prefix"))
		}
		return
	}
	if err != nil {
		if string(got) != "dst-prefix" {
			t.Fatalf("AppendLimit(%q..., %d) on error returned %q, want dst unchanged", short, limit, got)
		}
		if req.Kind != Unknown || req.Model != nil || req.CacheSalt != nil || req.Placement != 0 || req.TextLen != 0 {
			t.Fatalf("AppendLimit(%q..., %d) on error returned %+v, want a zero Request", short, limit, req)
		}
		return
	}
	if !bytes.HasPrefix(got, []byte("dst-prefix")) {
		t.Fatalf("AppendLimit(dst, %q..., %d) = %q, does not begin with dst", short, limit, got)
	}
	text := got[len("dst-prefix"):]
	n := len(want)
	if limit >= 0 {
		n = min(limit, len(want))
	}
	if !bytes.Equal(text, want[:n]) {
		t.Fatalf("AppendLimit(%q..., %d) =\n  %q\nwant the first %d bytes of Append's\n  %q", short, limit, text, n, want)
	}
	if req.Kind != wreq.Kind || !bytes.Equal(req.Model, wreq.Model) || (req.Model == nil) != (wreq.Model == nil) ||
		!bytes.Equal(req.CacheSalt, wreq.CacheSalt) || (req.CacheSalt == nil) != (wreq.CacheSalt == nil) {
		t.Fatalf("AppendLimit(%q..., %d) Request %+v, Append's %+v", short, limit, req, wreq)
	}
	if wreq.TextLen != len(want) {
		t.Fatalf("Append(%q...) TextLen %d, want %d", short, wreq.TextLen, len(want))
	}
	exact := n == len(want) && limit != len(want) || bytes.IndexByte(body, '\\') < 0
	// An escape is 2 to 6 bytes for 1 to 3 of text (a pair, 12 for 4).
	slack := 5 * bytes.Count(body, []byte{'\\'})
	if req.TextLen < len(want) || req.TextLen > len(want)+slack || exact && req.TextLen != len(want) {
		t.Fatalf("AppendLimit(%q..., %d) TextLen %d, want %d (or at most %d more if cut)", short, limit, req.TextLen, len(want), slack)
	}
	if wp := min(wreq.Placement, n); req.Placement != wp {
		t.Fatalf("AppendLimit(%q..., %d) Placement %d, want %d (Append's %d clamped to %d)", short, limit, req.Placement, wp, wreq.Placement, n)
	}
}

// limitsFor returns the limits to try on a body whose text has n bytes:
// every limit up to 300, the chunk boundaries of chunk sizes 64 and 256
// (and one byte either side), n-1, n, n+1, and a few at random.
func limitsFor(n int, r *rand.Rand) []int {
	var ls []int
	for l := range min(n+2, 300) {
		ls = append(ls, l)
	}
	for _, size := range []int{64, 256} {
		for l := size; l <= n+size; l += size {
			ls = append(ls, l-1, l, l+1)
		}
	}
	ls = append(ls, n-1, n, n+1, 2*n+5, 1<<30, -1)
	for range 8 {
		ls = append(ls, r.IntN(n+2))
	}
	return ls
}

// corpusBodies returns the bodies of the tests and fuzz seeds: golden
// bodies, error cases, the FuzzAppend seed corpus, generated conversations
// in every serialisation style and the benchmarks' generated bodies.
func corpusBodies(t testing.TB) map[string][]byte {
	bodies := map[string][]byte{}
	for _, tt := range goldenCases {
		bodies["golden/"+tt.name] = []byte(tt.body)
	}
	for _, tt := range errorCases {
		if len(tt.body) < 4096 { // the 100 KB ones are slow to test at every limit, and fail before any text
			bodies["error/"+tt.name] = []byte(tt.body)
		}
	}
	files, err := filepath.Glob("testdata/fuzz/FuzzAppend/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no FuzzAppend seed corpus: %v", err)
	}
	for _, f := range files {
		bodies["seed/"+filepath.Base(f)] = readSeed(t, f)
	}
	r := rand.New(rand.NewPCG(3, 5))
	for _, d := range []string{"openai_chat", "anthropic_messages", "openai_responses", "openai_completions_ids", "sglang_generate_ids", "openai_completions_batch"} {
		for k := range 6 {
			c := genConversation(r, d, 1+r.IntN(10))
			st := styles[k%len(styles)]
			bodies[fmt.Sprintf("gen/%s/%d", d, k)] = st.encode(c.request(len(c.turns), r.IntN(len(c.top)+1)))
		}
	}
	for _, d := range benchDialects {
		bodies["bench/"+d.name] = d.gen(4 << 10)
	}
	return bodies
}

// readSeed reads a file of the Go fuzzing corpus format holding one
// []byte value.
func readSeed(t testing.TB, name string) []byte {
	raw, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
		t.Fatalf("%s: not a corpus file of one []byte", name)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return []byte(s)
}

// mutations returns body cut short and with invalid escapes, invalid
// literals and stray bytes at a few offsets, so that limited renderings
// meet errors after the limit as well as before it.
func mutations(body []byte, r *rand.Rand) [][]byte {
	var out [][]byte
	for range 6 {
		if len(body) == 0 {
			break
		}
		k := r.IntN(len(body))
		out = append(out, body[:k])
		for _, ins := range []string{`\q`, `\u12x4`, `\ud83d`, `\`, `"`, `x`, `]`, `1.`, "\\u00e9\\ud83d\\ude00"} {
			m := append(append(bytes.Clone(body[:k]), ins...), body[k:]...)
			out = append(out, m)
		}
	}
	return out
}

// TestAppendLimitMatchesAppend: for every body of the tests and seeds
// (and mutations of them), at many limits, AppendLimit appends a prefix
// of Append's text and reports the same error and Request.
func TestAppendLimitMatchesAppend(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, body := range corpusBodies(t) {
		t.Run(name, func(t *testing.T) {
			text, _, _ := Append(nil, body)
			for _, l := range limitsFor(len(text), r) {
				checkLimit(t, body, l)
			}
			for _, m := range mutations(body, r) {
				mt, _, _ := Append(nil, m)
				for _, l := range []int{0, 1, 7, len(mt) / 3, len(mt) / 2, len(mt) - 1, len(mt), len(mt) + 1} {
					checkLimit(t, m, l)
				}
			}
		})
	}
}

// TestAppendLimitCases: the shapes where the limit falls in the middle of
// something: a part's length, a role (the placement key needs to know
// whether it is "user"), an escape, a digest, token ids, raw tools, and
// sections met out of their canonical order.
func TestAppendLimitCases(t *testing.T) {
	long := strings.Repeat(`lorem \"ipsum\" \u00e9\ud83d\ude00 dolor\n`, 40)
	bodies := []string{
		`{"messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"assistant","content":"` + long + `"},{"role":"\u0075ser","content":"hi"},{"role":"user","content":"again"}]}`,
		`{"messages":[{"content":"` + long + `","role":"user"},{"role":"user","content":"x"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"` + long + `"},{"type":"image_url","image_url":{"url":"https:\/\/x\/a.png"}},{"type":"custom","x":1}]}]}`,
		`{"model":"claude","messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"` + long + `"}]},{"text":"after","type":"text"}]}],"system":"` + long + `","tools":[{"name":"t","input_schema":{}}]}`,
		`{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"` + long + `"},{"type":"tool_use","name":"n","input":{"a":"` + long + `"}}]},{"role":"user","content":"q"}]}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"` + long + `"}}]},{"role":"tool","content":"r"}]}`,
		`{"input":[{"role":"user","content":"` + long + `"},{"type":"function_call","name":"f","arguments":"` + long + `"},{"type":"function_call_output","output":"o"},{"type":"reasoning","summary":[]}],"instructions":"` + long + `","model":"gpt"}`,
		`{"prompt":["` + long + `",[1,2,3],"x"],"model":"m","cache_salt":"s"}`,
		`{"input_ids":[` + strings.Repeat("123456,", 200) + `7]}`,
		`{"input_ids":[1,2,3],"text":"` + long + `"}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[` + strings.Repeat(`{"type":"function","function":{"name":"f"}},`, 30) + `{}]}`,
		// Duplicate members and late types: renderings redone from
		// spans, the discarded one begun before the limit or after it.
		`{"messages":[{"role":"user","content":"` + long + `","content":"b"},{"role":"user","content":"` + long + `"}]}`,
		`{"messages":[{"role":"user","content":"` + long + `"},{"role":"user","content":"` + long + `","content":"b"},{"role":"a","role":"user","content":"c"}]}`,
		`{"messages":[{"role":"user","content":"` + long + `"},{"role":"user","content":[{"type":"text","text":"` + long + `","text":"b"},{"text":"c","type":"text"}]}]}`,
		`{"input":[{"role":"user","content":"` + long + `","type":"other"},{"role":"user","content":"` + long + `"},{"role":"user","content":"` + long + `","type":"other"},{"type":"function_call_output","output":"` + long + `","output":"o"}]}`,
		// Invalid escapes and unterminated strings well after the limit.
		`{"messages":[{"role":"user","content":"` + long + `"},{"role":"user","content":"` + long + `\q"}]}`,
		`{"messages":[{"role":"user","content":"` + long + `"},{"role":"user","content":"` + long + `\u12"}]}`,
		`{"messages":[{"role":"user","content":"` + long + `"},{"role":"user","content":"` + long + `\x \"`,
		`{"prompt":"` + long + `\`,
	}
	r := rand.New(rand.NewPCG(9, 9))
	for i, body := range bodies {
		text, _, _ := Append(nil, []byte(body))
		for _, l := range limitsFor(len(text), r) {
			checkLimit(t, []byte(body), l)
		}
		if t.Failed() {
			t.Fatalf("body %d", i)
		}
	}
}

// TestAppendLimitRendersOnlyToLimit: a limited rendering of a long chat
// body fits in a buffer of limit + 3 bytes (it writes nothing past that)
// and allocates nothing. (TextLen is checked by checkLimit.)
func TestAppendLimitRendersOnlyToLimit(t *testing.T) {
	body := genChat(1 << 20)
	whole, _, err := Append(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, 1, 4096, 128 << 10} {
		buf := make([]byte, 0, limit+3)
		var got []byte
		var req Request
		allocs := testing.AllocsPerRun(5, func() {
			got, req, err = AppendLimit(buf, body, limit)
		})
		if err != nil || !bytes.Equal(got, whole[:limit]) || req.TextLen < len(whole) {
			t.Fatalf("AppendLimit(1 MB chat, %d) = %d bytes, TextLen %d, %v, want the first %d of %d", limit, len(got), req.TextLen, err, limit, len(whole))
		}
		if allocs != 0 {
			t.Errorf("AppendLimit(buf of %d, 1 MB chat, %d) allocates %v times per call, want 0", cap(buf), limit, allocs)
		}
	}
}

// TestCountString: countString measures and rejects every string as
// appendString renders and rejects it, from the start and from wherever
// appendStringMax stops.
func TestCountString(t *testing.T) {
	pieces := []string{"a", "bcdefgh", "\\\\", "\\\"", "\\n", "\\u00e9", "\\ud83d\\ude00", "\\ud83d", "\\ude00",
		"\\u12", "\\x", "\\", "\"", "\xff", "é", "        ", "\\u00", "\\uzzzz", "\\/", "\\ud83d\\u0041", "\\udc00\\ud800"}
	for n := range 4000 {
		s := []byte{'x', '"'}
		for k, x := 0, n; k < 1+n%11; k++ {
			s = append(s, pieces[x%len(pieces)]...)
			x = x*7 + k + 3
		}
		checkCountString(t, s, 1)
	}
}

func checkCountString(t *testing.T, b []byte, i int) {
	t.Helper()
	want, wantEnd, wantErr := appendString(nil, b, i)
	end, n, err := countString(b, i, i+1)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || (err == nil && (end != wantEnd || n != len(want))) {
		t.Fatalf("countString(%q, %d) = %d, %d, %v, want %d, %d, %v", b, i, end, n, err, wantEnd, len(want), wantErr)
	}
	for lim := range len(want) + 2 {
		got, r, more, err := appendStringMax(nil, b, i, lim)
		if err != nil || !more {
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || (err == nil && (r != wantEnd || !bytes.Equal(got, want))) {
				t.Fatalf("appendStringMax(%q, %d, lim %d) = %q, %d, %v, want %q, %d, %v", b, i, lim, got, r, err, want, wantEnd, wantErr)
			}
			continue
		}
		if len(got) < lim || len(got) > lim+3 || !bytes.HasPrefix(want, got) {
			t.Fatalf("appendStringMax(%q, %d, lim %d) stopped with %q, want at least %d, at most 3 more, of %q", b, i, lim, got, lim, want)
		}
		end, n, err := countString(b, i, r)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || (err == nil && (end != wantEnd || len(got)+n != len(want))) {
			t.Fatalf("countString(%q, %d, from %d) after appendStringMax(lim %d) = %d, %d+%d, %v, want %d, %d, %v", b, i, r, lim, end, len(got), n, err, wantEnd, len(want), wantErr)
		}
	}
}

// FuzzCountString checks countString and appendStringMax against
// appendString on arbitrary strings.
func FuzzCountString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\"b\\c\/d\be\ff\ng\rh\ti"`, `"\ud83d\ude00x"`, `"\ud83d\u0041"`, `"\x"`, `"\u12"`, `"a\"b`, `"` + "\xff" + `"`, `"\x \"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			b = append([]byte{'"'}, b...)
		}
		checkCountString(t, b, 0)
	})
}

// FuzzAppendLimit checks checkLimit's invariants on arbitrary bodies and
// limits (seeds: the golden bodies and the FuzzAppend corpus at a few
// limits). Each input is checked at the limit given and at that limit
// modulo the text's length + 1, so that most inputs cut the text.
func FuzzAppendLimit(f *testing.F) {
	var seeds [][]byte
	for _, tt := range goldenCases {
		seeds = append(seeds, []byte(tt.body))
	}
	files, _ := filepath.Glob("testdata/fuzz/FuzzAppend/*")
	for _, name := range files {
		seeds = append(seeds, readSeed(f, name))
	}
	for k, body := range seeds {
		for _, l := range []uint32{0, 1, uint32(k*37) % 512, 1 << 20} {
			f.Add(body, l)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, limit uint32) {
		checkLimit(t, body, int(limit))
		text, _, _ := Append(nil, body)
		checkLimit(t, body, int(limit)%(len(text)+1))
	})
}
