package main

import (
	"os"
	"testing"
	"time"
)

// TestMeasureLoad runs the smallest load cell of each policy through the
// Caddy binary that CADDY_BINARY names, as bench/memory/run.sh runs its
// cells: a real `caddy run` starts, proxies every request to the
// engines, gives its resident set and, for prefix_cache, the policy's
// body metrics through its admin API, and stops.
//
//	go build -o /tmp/caddy ./cmd/caddy
//	CADDY_BINARY=/tmp/caddy go test -run TestMeasureLoad ./bench/cmd/membench
func TestMeasureLoad(t *testing.T) {
	bin := os.Getenv("CADDY_BINARY")
	if bin == "" {
		t.Skip("set CADDY_BINARY to a caddy built with this module (CI does)")
	}
	const size, conc = 32 << 10, 4
	o := options{caddy: bin, stream: 200 * time.Millisecond, arrivals: "burst"}
	eng, err := startEngines(2, o.stream)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.close()
	bodies := prompts(size, conc)
	for _, policy := range []string{"round_robin", "prefix_cache"} {
		c, err := measureLoad(o, t.TempDir(), eng, policy, bodies, size, conc)
		if err != nil {
			t.Fatalf("measureLoad(%s): %v", policy, err)
		}
		if c.Errors != 0 {
			t.Errorf("%s: %d errors (%v), want 0", policy, c.Errors, c.ErrorKinds)
		}
		if c.RestRSS <= 0 || c.PeakRSS < c.RestRSS {
			t.Errorf("%s: resident set at rest %d, peak %d; want a positive rest at most the peak", policy, c.RestRSS, c.PeakRSS)
		}
		if policy == "prefix_cache" && c.Budget <= 0 {
			t.Errorf("prefix_cache: body budget %v from Caddy's metrics, want it read", c.Budget)
		}
	}
}
