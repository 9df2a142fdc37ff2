package fleet

import (
	"sync"
	"testing"

	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

var own = &Options{}

func TestTicketMovesAndSettles(t *testing.T) {
	var f Fleet
	var c Ticket
	read := func(id prefixindex.ID) (int64, int64) {
		s := f.Read(id, "", 0, own)
		return s.Bytes, s.Uncached
	}

	f.Place(&c, 1, "a", 0, 1000, 300, own)
	if got, ugot := read(1); got != 1000 || ugot != 300 {
		t.Fatalf("after the first attempt upstream 1 holds %d bytes, %d uncached, want 1000 and 300", got, ugot)
	}
	// A retry moves the whole charge to the upstream it chose, with what
	// that one lacks.
	f.Place(&c, 2, "b", 0, 1000, 1000, own)
	if a, b := f.Read(1, "", 0, own).Bytes, f.Read(2, "", 0, own).Bytes; a != 0 || b != 1000 {
		t.Fatalf("after a retry upstreams 1 and 2 hold %d and %d bytes, want 0 and 1000", a, b)
	}
	if a, b := f.Read(1, "", 0, own).Uncached, f.Read(2, "", 0, own).Uncached; a != 0 || b != 1000 {
		t.Fatalf("after a retry upstreams 1 and 2 hold %d and %d uncached bytes, want 0 and 1000", a, b)
	}
	if id := c.Settle(); id != 2 {
		t.Errorf("Settle() = %d, want the last upstream placed, 2", id)
	}
	for id := range uint16(3) {
		if got, ugot := read(prefixindex.ID(id)); got != 0 || ugot != 0 {
			t.Fatalf("after the request ended upstream %d holds %d bytes, %d uncached", id, got, ugot)
		}
	}
	if id, n, u := c.Last(); id != 2 || n != 1000 || u != 1000 {
		t.Errorf("Last() after Settle = %d, %d, %d; want 2, 1000, 1000", id, n, u)
	}
	// An attempt after the end (the client went away mid-retry) charges
	// nothing that would never be released.
	if f.Place(&c, 3, "c", 0, 1000, 1000, own) {
		t.Error("Place after Settle = true, want false")
	}
	if got, ugot := read(3); got != 0 || ugot != 0 || f.Sent(3) != 0 {
		t.Fatalf("a Place after the end charged %d bytes, %d uncached, %d sent", got, ugot, f.Sent(3))
	}
	// Sent only grows: it counts what was placed, settled or not.
	if got := f.Sent(1) + f.Sent(2); got != 1300 {
		t.Errorf("Sent(1) + Sent(2) = %d, want 1300", got)
	}
}

func TestTicketManyRequests(t *testing.T) {
	var f Fleet
	var wg sync.WaitGroup
	tickets := make([]Ticket, 64)
	for i := range tickets {
		wg.Go(func() { f.Place(&tickets[i], 7, "d", 0, int64(i+1), 1, own) })
	}
	wg.Wait()
	if got, want := f.Read(7, "d", 0, own).Bytes, int64(64*65/2); got != want {
		t.Fatalf("64 requests hold %d bytes, want %d", got, want)
	}
	if got := f.Read(7, "d", 0, own).Uncached; got != 64 {
		t.Fatalf("64 requests hold %d uncached bytes, want 64", got)
	}
	for i := range tickets {
		wg.Go(func() { tickets[i].Settle() })
	}
	wg.Wait()
	if s := f.Read(7, "d", 0, own); s.Bytes != 0 || s.Uncached != 0 {
		t.Fatalf("after 64 settles upstream 7 holds %d bytes, %d uncached", s.Bytes, s.Uncached)
	}
}
