package main

import (
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
