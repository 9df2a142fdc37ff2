package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/workload"
)

func TestParseSpread(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"grid", workload.SpreadGrid, false},
		{"0", 0, false},
		{"3s", 3 * time.Second, false},
		{"-1s", 0, true},
		{"often", 0, true},
	} {
		got, err := parseSpread(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
			t.Errorf("parseSpread(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestRender: -render prints, from a -json file, the tables its run
// printed (testdata/chat.md, as prefixbench wrote it with -md beside
// testdata/chat.json), so results directories keep only the JSON.
func TestRender(t *testing.T) {
	want, err := os.ReadFile("testdata/chat.md")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := render(&got, "testdata/chat.json"); err != nil {
		t.Fatalf("render(testdata/chat.json): %v", err)
	}
	if got.String() != string(want) {
		t.Errorf("render(testdata/chat.json) =\n%s\nwant testdata/chat.md:\n%s", got.String(), want)
	}
	if err := render(&got, "testdata/chat.md"); err == nil {
		t.Error("render of a markdown file: no error")
	}
}
