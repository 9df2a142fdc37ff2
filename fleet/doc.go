// Package fleet is what one edge knows of each upstream engine of a
// prefix_cache index, apart from the prefixes it holds (prefixindex):
// how much this edge has in flight there, how much uncached prefill is
// queued there and how fast the engine drains it, what the other edges
// of the tier report of their load, what the engine's own metrics say,
// and what its answers' cached_tokens say of its cache. Everything is
// keyed by the upstream's prefixindex.ID; a Fleet belongs to one index.
//
// The split is gRPC's balancer's: the slow path builds state (Report,
// Expire, Scraped, Answered, Forget run on background goroutines or
// once a request has ended), the fast path only reads and records (Read
// and Place run once per candidate and per choice, take no lock and
// allocate nothing). A Fleet's zero value is ready to use.
//
// # Signals
//
// Units are bytes of routing text (the prefix-stable text prefixindex
// chunks), nanoseconds, and requests. Time is passed in, as unix
// nanoseconds on the fast path, so that tests need no clock.
//
//   - In flight (State.Bytes, State.Uncached): the routing text of the
//     requests this edge placed at the upstream and that have not ended,
//     and the part of it the upstream was not believed to hold. Place
//     adds a request's bytes, a Place on the same Ticket (a retry to
//     another upstream) moves them, and Ticket.Settle gives them back
//     when the request ends, streamed response and all. Requests in
//     flight are not counted here: Caddy's Upstream.NumRequests counts
//     them, for every policy and handler of the process.
//   - Queued prefill (State.Queued, State.Wait): a fluid estimate of the
//     uncached text waiting to be prefilled at the upstream. Every
//     placement's uncached bytes join a queue that drains at the
//     upstream's speed (State.NsPerByte), one request after another; the
//     estimate never exceeds the uncached bytes still in flight there
//     (this edge's, and the other edges' bytes in flight when they count),
//     so a speed set too low cannot make it grow without end, and it
//     never exceeds an hour. Wait is the time the queue takes to drain.
//   - Speed (State.NsPerByte): nanoseconds per byte of routing text the
//     engine prefills at. It is the engine's measured speed (from its
//     counters of prompt tokens and prefill seconds, Options.EnginePrefill)
//     while its scrapes are fresh, else the configured one
//     (Options.NsPerByte). A configured speed of 0 turns the queue off.
//   - The tier (State.RemoteRequests, State.RemoteBytes): the sum of the
//     other edges' latest load reports (Report), each counted until it is
//     older than the report TTL (Expire). Each report also carries the
//     uncached text the edge has sent each upstream so far (Sent on the
//     edge that reports); what grew since its previous report joins the
//     upstream's queue here, a report interval late, as this edge's own
//     placements do. Claims are clamped (MaxReportRequests,
//     MaxReportBytes, MaxOrigins), so no report can overflow a sum or
//     grow memory; and Counted counts the sum at most RemoteRatio times
//     this edge's own load at the upstream, so no report can make an
//     upstream look full where this edge sends little.
//   - The engine (Scraped): the latest good scrape of the upstream's
//     metrics, and from it what the engine runs and queues beyond this
//     edge's requests (State.RemoteRequests, the larger of that and the
//     tier's count, with Options.EngineQueue) and its prefill speed. A
//     sample counts only for the upstream it was taken of (an ID may be
//     reused by another) and only until it is older than
//     Options.EngineStale; stale or missing, the edge reads the fleet as
//     if it had never scraped.
//   - Answers (Answered): what the engines' usage said they had cached,
//     against what the index predicted, per upstream; and, from them
//     and the capacities engines publish, each engine's KV capacity,
//     which the fleet applies to the index (prefixindex.SetCapacity).
//
// Nothing here is ever needed for a request to be served: every signal
// is a hint, and an edge that has none routes by the index and the
// rendezvous hash alone.
package fleet
