package caddymodule

import (
	"sync"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

func TestChargeMovesAndReleases(t *testing.T) {
	tab, utab := new(inflightBytes), new(inflightBytes)
	var c charge

	c.move(tab, utab, 1, "a", 0, 1000, 300)
	if got, ugot := tab.load(1), utab.load(1); got != 1000 || ugot != 300 {
		t.Fatalf("after the first attempt upstream 1 holds %d bytes, %d uncached, want 1000 and 300", got, ugot)
	}
	// A retry moves the whole charge to the upstream it chose, with what
	// that one lacks.
	c.move(tab, utab, 2, "b", 0, 1000, 1000)
	if a, b := tab.load(1), tab.load(2); a != 0 || b != 1000 {
		t.Fatalf("after a retry upstreams 1 and 2 hold %d and %d bytes, want 0 and 1000", a, b)
	}
	if a, b := utab.load(1), utab.load(2); a != 0 || b != 1000 {
		t.Fatalf("after a retry upstreams 1 and 2 hold %d and %d uncached bytes, want 0 and 1000", a, b)
	}
	if id, dial, _ := c.release(); id != 2 || dial != "b" {
		t.Errorf("release() = %d, want the last upstream charged, 2", id)
	}
	for id := range uint16(3) {
		if got, ugot := tab.load(prefixindex.ID(id)), utab.load(prefixindex.ID(id)); got != 0 || ugot != 0 {
			t.Fatalf("after the request ended upstream %d holds %d bytes, %d uncached", id, got, ugot)
		}
	}
	// An attempt after the end (the client went away mid-retry) charges
	// nothing that would never be released.
	if c.move(tab, utab, 3, "c", 0, 1000, 1000) {
		t.Error("move after the release = true, want false")
	}
	if got, ugot := tab.load(3), utab.load(3); got != 0 || ugot != 0 {
		t.Fatalf("a move after the end charged %d bytes, %d uncached", got, ugot)
	}
}

func TestChargeManyRequests(t *testing.T) {
	tab, utab := new(inflightBytes), new(inflightBytes)
	var wg sync.WaitGroup
	charges := make([]charge, 64)
	for i := range charges {
		wg.Go(func() { charges[i].move(tab, utab, 7, "d", 0, int64(i+1), 1) })
	}
	wg.Wait()
	if got, want := tab.load(7), int64(64*65/2); got != want {
		t.Fatalf("64 requests hold %d bytes, want %d", got, want)
	}
	if got := utab.load(7); got != 64 {
		t.Fatalf("64 requests hold %d uncached bytes, want 64", got)
	}
	for i := range charges {
		wg.Go(func() { charges[i].release() })
	}
	wg.Wait()
	if got, ugot := tab.load(7), utab.load(7); got != 0 || ugot != 0 {
		t.Fatalf("after 64 releases upstream 7 holds %d bytes, %d uncached", got, ugot)
	}
}
