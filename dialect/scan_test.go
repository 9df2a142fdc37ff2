package dialect

import "testing"

func TestAppendStringEscapes(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`""`, ""},
		{`"plain"`, "plain"},
		{`"a\"b\\c\/d\be\ff\ng\rh\ti"`, "a\"b\\c/d\be\ff\ng\rh\ti"},
		{`"\u00e9\u6771\u4eac"`, "é東京"},
		{`"\ud83d\ude00"`, "😀"},
		{`"\uD83D\uDE00"`, "😀"},
		{`"\ud83d"`, "\ufffd"},                       // lone high surrogate
		{`"\ude00x"`, "\ufffdx"},                     // lone low surrogate
		{`"\ud83d\u0041"`, "\ufffdA"},                // high surrogate, then not a low one
		{`"a\"\"\"b"`, `a"""b`},                      // escaped quotes force new quote searches
		{`"` + "\xff\xfe raw" + `"`, "\xff\xfe raw"}, // invalid UTF-8 copied as is
		{`"a long string, longer than the short-string window, with an \n escape"`, "a long string, longer than the short-string window, with an \n escape"},
	} {
		got, end, err := appendString(nil, []byte(tt.in), 0)
		if err != nil || string(got) != tt.want || end != len(tt.in) {
			t.Errorf("appendString(%s) = %q, %d, %v, want %q, %d, nil", tt.in, got, end, err, tt.want, len(tt.in))
		}
		end, err = skipString([]byte(tt.in), 0)
		if err != nil || end != len(tt.in) {
			t.Errorf("skipString(%s) = %d, %v, want %d, nil", tt.in, end, err, len(tt.in))
		}
	}
}
