package dialect

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzAppend checks Append's invariants on arbitrary bodies (seed corpus in
// testdata/fuzz/FuzzAppend, plus the golden bodies):
//
//   - it never panics, and never modifies the body;
//   - it appends after dst's bytes and leaves them alone; on error it
//     returns dst unchanged;
//   - it is deterministic;
//   - valid JSON is never reported as malformed;
//   - Placement is within the text;
//   - prefix stability: for a valid body whose messages, input, prompt,
//     text or input_ids is an array, the body with the array's last
//     element removed renders a prefix of the full body's text.
//
// Two seeds spend the budget (see "Budget" in the package doc), in their
// last turn and well before it.
func FuzzAppend(f *testing.F) {
	for _, tt := range goldenCases {
		f.Add([]byte(tt.body))
	}
	f.Add(tinyMessages(sectionBudget/3 + 1))
	f.Add([]byte(`{"model":"claude","messages":[{"role":"user","content":[` + strings.Repeat(`{"type":"text","text":"a"},{},`, sectionBudget/4) + `{"type":"text","text":"z"}]}],"system":"s"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		dst := []byte("dst-prefix")
		out, req, err := Append(dst, body)
		if !bytes.Equal(body, orig) {
			t.Fatalf("Append modified its input")
		}
		if !bytes.HasPrefix(out, []byte("dst-prefix")) {
			t.Fatalf("Append(dst, body) = %q, does not begin with dst", out)
		}
		if err != nil {
			if len(out) != len(dst) {
				t.Fatalf("Append(dst, body) error %v, returned %q, want dst unchanged", err, out)
			}
			if !errors.Is(err, ErrNotJSON) && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrUnknownDialect) {
				t.Fatalf("Append error %v matches no sentinel", err)
			}
			if json.Valid(body) && !errors.Is(err, ErrUnknownDialect) {
				t.Fatalf("Append(valid JSON) error %v, want nil or ErrUnknownDialect", err)
			}
			return
		}
		text := out[len(dst):]
		if req.Placement < 0 || req.Placement > len(text) {
			t.Fatalf("Append Placement %d, want in [0, %d]", req.Placement, len(text))
		}
		again, req2, err2 := Append(nil, body)
		if err2 != nil || !bytes.Equal(again, text) || req2.Placement != req.Placement || req2.Kind != req.Kind {
			t.Fatalf("Append is not deterministic: %q, %+v, %v then %q, %+v, %v", text, req, err, again, req2, err2)
		}
		if json.Valid(body) {
			checkPrefix(t, body)
		}
	})
}

// checkPrefix re-serialises body with and without the last element of its
// turns array and checks that the shorter renders a prefix of the longer.
// Both are re-serialised (encoding/json compacts and sorts), so raw-bytes
// fields agree between them.
func checkPrefix(t *testing.T, body []byte) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return
	}
	for _, field := range []string{"messages", "input", "prompt", "text", "input_ids"} {
		raw, ok := top[field]
		if !ok {
			continue
		}
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil || len(elems) == 0 {
			return
		}
		encode := func(k int) []byte {
			top[field], _ = json.Marshal(elems[:k])
			b, err := json.Marshal(top)
			if err != nil {
				t.Fatalf("json.Marshal: %v", err)
			}
			return b
		}
		long, short := encode(len(elems)), encode(len(elems)-1)
		top[field] = raw
		lt, _, errL := Append(nil, long)
		if errL != nil {
			return
		}
		st, _, errS := Append(nil, short)
		if errS != nil {
			t.Fatalf("Append(%s) error %v, but with one more element Append(%s) succeeds", short, errS, long)
		}
		if !bytes.HasPrefix(lt, st) {
			t.Fatalf("prefix stability: Append(%s) =\n  %q\nnot a prefix of Append(%s) =\n  %q", short, st, long, lt)
		}
		return
	}
}
