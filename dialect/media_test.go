package dialect

import "testing"

// TestJSONMediaType: the fast path for common values agrees with
// mime.ParseMediaType, and the rest still goes through it.
func TestJSONMediaType(t *testing.T) {
	for _, tt := range []struct {
		ct   string
		want bool
	}{
		{"", true},
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"application/json;charset=utf-8", true},
		{"application/json; charset=UTF-8", true},
		{"Application/JSON", true},
		{"application/vnd.api+json", true},
		{"text/plain; charset=utf-8", true},
		{"application/x-www-form-urlencoded", false},
		{"application/json; charset", false}, // malformed parameter
		{"multipart/form-data; boundary=x", false},
	} {
		if got := JSONMediaType(tt.ct); got != tt.want {
			t.Errorf("JSONMediaType(%q) = %v, want %v", tt.ct, got, tt.want)
		}
	}
}

func TestJSONMediaTypeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("skipped under the race detector, which allocates")
	}
	if n := testing.AllocsPerRun(100, func() { JSONMediaType("application/json; charset=utf-8") }); n != 0 {
		t.Errorf("JSONMediaType(application/json; charset=utf-8) allocates %v times, want 0", n)
	}
}

func TestIdentityEncoding(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   bool
	}{
		{nil, true},
		{[]string{""}, true},
		{[]string{"identity"}, true},
		{[]string{"gzip"}, false},
		{[]string{"identity", "br"}, false},
	} {
		if got := IdentityEncoding(tt.values); got != tt.want {
			t.Errorf("IdentityEncoding(%q) = %v, want %v", tt.values, got, tt.want)
		}
	}
}
