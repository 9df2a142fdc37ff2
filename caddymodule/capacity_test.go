package caddymodule

import (
	"context"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// A reload that turns capacity off (or drops engine_metrics) leaves no
// engine capacity on the index it keeps; one that keeps it on keeps them.
func TestCapacitiesReleasedWithTheirLastInstance(t *testing.T) {
	for _, tc := range []struct {
		name     string
		next     *EngineMetrics
		wantKept bool
	}{
		{"reload without engine_metrics", nil, false},
		{"reload with capacity off", &EngineMetrics{}, false},
		{"reload with capacity on", &EngineMetrics{Capacity: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			old := &PrefixCacheSelection{MaxEntries: 7101, EngineMetrics: &EngineMetrics{Capacity: true}}
			if err := old.Provision(ctx); err != nil {
				t.Fatal(err)
			}
			id, err := old.state.index.Intern("10.9.1.1:8000")
			if err != nil {
				t.Fatal(err)
			}
			old.state.index.SetCapacity(id, 500) // as a scrape would
			next := provisioned(t, &PrefixCacheSelection{MaxEntries: 7101, EngineMetrics: tc.next})
			if next.state != old.state {
				t.Fatal("the reload did not keep the index")
			}
			if err := old.Cleanup(); err != nil {
				t.Fatal(err)
			}
			chunks, _ := next.state.index.Capacity(id)
			if kept := chunks == 500; kept != tc.wantKept {
				t.Errorf("capacity after the old config's cleanup: %d chunks; kept %v, want %v", chunks, kept, tc.wantKept)
			}
		})
	}
}
