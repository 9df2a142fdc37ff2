package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prefixcache/caddy-prefixcache/bench/engine"
)

// TestFaultsShort is the short version of the fault run: 4 s of load per
// policy under the recommended options. prefix_cache must lose no request
// (and so none least_conn served), route to every engine while it is
// healthy, stop routing to the dead, wedged and failing ones, and take the
// restarted engine back into rotation.
func TestFaultsShort(t *testing.T) {
	const clients = 8
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0.05
	run := func(policy string) Result {
		t.Helper()
		r, err := Run(context.Background(), Options{
			Policy: policy, Config: "recommended", Duration: 4 * time.Second,
			Clients: clients, Timeout: 15 * time.Second, Engine: cfg,
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ours, stock := run("prefix_cache"), run("least_conn")
	var sb strings.Builder
	report(&sb, []Result{ours, stock})
	t.Log("\n" + sb.String())

	if ours.Sent < 100 {
		t.Fatalf("prefix_cache run sent %d requests, too few to mean anything", ours.Sent)
	}
	if ours.Lost > 0 {
		t.Errorf("prefix_cache lost %d of %d requests (%v); least_conn lost %d of %d", ours.Lost, ours.Sent, ours.LostBy, stock.Lost, stock.Sent)
	}
	for i := range 4 {
		if ours.Reached[i][phaseWarm] == 0 {
			t.Errorf("engine %d received nothing while all were healthy", i)
		}
	}
	// Once an engine fails, health checks take it out: the policy must
	// not keep choosing it (retries would hide that from the loss count).
	// Before the first failure is counted, at most the requests in flight
	// at once can reach it.
	if n := ours.Reached[2][phase503]; n > 2*clients {
		t.Errorf("the engine answering 503 received %d requests after it started failing, want at most %d: it was not taken out", n, 2*clients)
	}
	if n := ours.Hung[1]; n > 2*clients {
		t.Errorf("the wedged engine received %d requests, want at most %d: it was not taken out", n, 2*clients)
	}
	if ours.Restarted == 0 {
		t.Errorf("the restarted engine served nothing after its restart: not taken back into rotation (reached %v)", ours.Reached[0])
	}
}
