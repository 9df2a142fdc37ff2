package main

import (
	"os"
	"testing"
	"time"
)

// TestMeasureLoad runs the smallest load cell of each policy through the
// Caddy binary that CADDY_BINARY names, as bench/memory/run.sh runs its
// cells, through Caddyfile.example: a real `caddy run` starts, proxies
// every request to the engines, gives its resident set and, for
// prefix_cache, the policy's body metrics through its admin API, and
// stops. prefix_cache routes every request (the Caddyfile's tenant
// option finds the key), and reads the body_budget it was given.
//
//	go build -o /tmp/caddy ./cmd/caddy
//	CADDY_BINARY=/tmp/caddy go test -run TestMeasureLoad ./bench/cmd/membench
func TestMeasureLoad(t *testing.T) {
	bin := os.Getenv("CADDY_BINARY")
	if bin == "" {
		t.Skip("set CADDY_BINARY to a caddy built with this module (CI does)")
	}
	const size, conc = 32 << 10, 4
	o := options{caddy: bin, stream: 200 * time.Millisecond, caddyfile: "../../../Caddyfile.example"}
	eng, err := startEngines(2, o.stream)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.close()
	bodies := prompts(size, conc)
	for _, policy := range []string{"round_robin", "prefix_cache"} {
		lc := loadCell{policy: policy, arrivals: "burst", budget: "24MiB", run: 1, bodies: bodies, size: size, n: conc}
		c, err := measureLoad(o, t.TempDir(), eng, lc)
		if err != nil {
			t.Fatalf("measureLoad(%s): %v", policy, err)
		}
		if c.Config != "Caddyfile.example" {
			t.Errorf("%s: config %q, want Caddyfile.example", policy, c.Config)
		}
		if c.Errors != 0 {
			t.Errorf("%s: %d errors (%v), want 0", policy, c.Errors, c.ErrorKinds)
		}
		if c.RestRSS <= 0 || c.PeakRSS < c.RestRSS {
			t.Errorf("%s: resident set at rest %d, peak %d; want a positive rest at most the peak", policy, c.RestRSS, c.PeakRSS)
		}
		switch {
		case policy != "prefix_cache":
		case c.Budget != 24<<20:
			t.Errorf("prefix_cache: body budget %v from Caddy's metrics, want %v", c.Budget, 24<<20)
		case c.Outcomes["routed"] != conc:
			t.Errorf("prefix_cache: outcomes %v, want %d routed", c.Outcomes, conc)
		}
	}
}
