package fleet_test

import (
	"fmt"
	"time"

	"github.com/prefixcache/caddy-prefixcache/fleet"
	"github.com/prefixcache/caddy-prefixcache/prefixindex"
)

// A request of 8 KiB of routing text, 6 KiB of it not cached at
// upstream 1, is placed there; another edge reports its own load; the
// candidate's state is read as the choice reads it, and the request
// settles when it ends.
func Example() {
	var f fleet.Fleet
	opts := &fleet.Options{NsPerByte: 1e9 / 65536, Tier: true} // prefill_rate 64 KiB/s
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	const id = prefixindex.ID(1)

	var t fleet.Ticket
	f.Place(&t, id, "10.0.0.1:8000", now.UnixNano(), 8<<10, 6<<10, opts)
	f.Report(42, now, []fleet.Load{{ID: id, Upstream: "10.0.0.1:8000", Requests: 3, Bytes: 20 << 10}}, opts)

	s := f.Read(id, "10.0.0.1:8000", now.UnixNano(), opts)
	fmt.Printf("in flight: %d bytes here, %d requests and %d bytes elsewhere\n", s.Bytes, s.RemoteRequests, s.RemoteBytes)
	fmt.Printf("queued: %d bytes, %v to drain\n", s.Queued, time.Duration(s.Wait))

	t.Settle()
	s = f.Read(id, "10.0.0.1:8000", now.UnixNano(), opts)
	fmt.Printf("after the request: %d bytes here\n", s.Bytes)
	// Output:
	// in flight: 8192 bytes here, 3 requests and 20480 bytes elsewhere
	// queued: 6144 bytes, 93.75ms to drain
	// after the request: 0 bytes here
}
