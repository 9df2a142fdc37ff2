// Package selection chooses one upstream for a request, given each
// candidate's match depth (how many leading chunks of the request's routing
// text it is believed to hold in its KV cache), its in-flight load, its
// queued prefill and prefill speed, and a placement key taken from the
// request alone.
//
// It is step 5 ("Choose") of the data flow in DESIGN.md. It imports neither
// Caddy nor net/http: the caller filters the pool to the available upstreams,
// fills a caller-owned []Candidate and calls [Policy.Choose], which reads it
// and returns a [Choice] without allocating.
//
// # The bound
//
// A candidate is under the bound when, counting the incoming request, its
// in-flight load stays within it:
//
//	Load + 1 <= bound
//	bound     = ceil(LoadFactor * (sum(Load) + 1) / n) + Allowance
//
// where n is the number of candidates. The first term is the capacity of
// consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
// 2017) as buraksezer/consistent and vimeo's HAProxy hash-balance-factor
// compute it: the incoming request is counted both in the total and at the
// candidate. The Allowance term is ours: it keeps the bound from forcing
// requests apart at low load, where an inference engine batching hundreds
// of sequences is nowhere near overloaded. See [Policy.Bound].
//
// With LoadFactor >= 1, Allowance >= 0 and non-negative loads, at least one
// candidate is always under the bound: write sum(Load) = q*n + r with
// 0 <= r < n; the least-loaded candidate holds at most q, and
// ceil((sum+1)/n) = q+1. So a validated [Policy] with the byte bound off
// never needs its last resort.
//
// # The byte bound
//
// Requests to an inference engine differ in size by orders of magnitude:
// an agent's 60k-token context holds a hundred times the KV memory of a
// short chat turn, and an engine whose KV cache is full of long contexts
// preempts and evicts while its request count still looks low. With
// ByteAllowance > 0, a candidate must also be within the byte bound:
//
//	Bytes <= byteBound
//	byteBound = ceil(LoadFactor * (sum(Bytes) + size) / n) + ByteAllowance
//
// where size is the incoming request's. It counts the bytes a candidate
// already has in flight, not the incoming request's, so a request larger
// than the bound still has somewhere to go: the candidate with the fewest
// bytes holds at most the mean and is always within it. Both bounds must
// hold for a candidate to be under "the bound"; when the least loaded by
// requests and the least loaded by bytes differ, no candidate may be under
// both, and the last resort applies ([ReasonLeastLoaded]). See
// [Policy.ByteBound].
//
// # The choice
//
// A candidate with Depth >= MinDepth is a holder; a request no candidate
// holds is cold. A match shallower than MinDepth counts for nothing:
// following chat-template boilerplate would herd unrelated conversations
// onto whichever replica saw it first.
//
// Policy.Cost chooses by one cost, the same for warm and cold requests
// (caddymodule's default, choice cost); without it, by the rules further
// down (choice rules). Either way, the bound and the byte
// bound are hard caps, and with no candidate under the bound the
// least-loaded candidate takes the request ([ReasonLeastLoaded]).
//
// Choice.Preferred is what the policy would pick with no bound: the deepest
// holder, or for a cold request the rendezvous-hash winner. Choice.Spilled
// reports that the bound, the cost, the cold bound or the backlog moved
// the choice away from it.
//
// # The cost
//
// The aim is the shortest time to first token for the request without
// spending the fleet's caches to get it. The cost of a candidate is the
// request's predicted time to first token there, plus CacheWeight times
// the prefill that moving the request off its deepest holder throws away.
// For a request of the given size, at each candidate under the bound and
// the byte bound:
//
//	matched = min(Depth * ChunkSize, size)  (0 when Depth < MinDepth)
//	ns      = Candidate.NsPerByte, or Policy.NsPerByte when unset
//	wait    = Backlog * ns                  prefill queued ahead of it
//	own     = (size - matched) * ns         its own uncached prefill
//	ttft    = wait + own
//	lost    = (matched_best - matched) * Policy.NsPerByte
//	cost    = ttft + CacheWeight * lost
//
// where matched_best is the deepest holder's. ttft is what the request
// waits for at that candidate: the prefill queued there, then its own
// prompt less what is cached. lost is what moving off the deepest holder
// costs the fleet: a prefix recomputed here and held twice, in KV cache
// that other prefixes then lose, measured at the reference speed so that
// it does not depend on which engine recomputes it.
//
// Every request has a home: the deepest holder under the bound (the
// higher-ranked by rendezvous hashing among equally deep ones), or, if
// no holder is under the bound, the rendezvous-hash winner under it.
// The home depends on the index, the bound and the placement key alone,
// not on the queues. The request goes to the least cost under the bound
// (the deeper, then the higher-ranked, on a tie), and stays home when
// home is among the least. Reasons: [ReasonMatch] at the deepest holder,
// [ReasonSpill] at another holder, [ReasonSpillCold] at a candidate with
// no useful prefix; for a cold request, [ReasonCold] at the
// rendezvous-hash winner, [ReasonColdSpill] at the highest-ranked under
// the bound when the winner is over it, [ReasonPrefill] moved by the
// cost.
//
// Against an idle candidate with no useful prefix, a holder with queue q
// and match m of a request (one speed) keeps the request while
//
//	q <= (1 + CacheWeight) * m
//
// since moving gives up the match's prefill once in the request's own
// time to first token and CacheWeight times more for the fleet. So
// CacheWeight is the one knob between hit rate and time to first token:
// 0 counts only the request's predicted time to first token, and larger
// weights keep conversations on their holders longer, as the rules keep
// them whatever the queue. A cold request has nothing to lose, and goes
// where its predicted time to first token is least: where the least
// prefill is queued, which spreads a burst of new conversations over
// the fleet instead of stacking two long prefills on one engine.
//
// On an idle fleet (no backlog, one speed) every candidate's ttft is its
// unmatched part, so no move saves anything: the cost, sticky or not,
// places the deepest holder under the bound, else the rendezvous-hash
// winner, as the rules do with the cold bound off, and independent
// instances agree without talking. With no speed at all
// (Policy.NsPerByte 0 and no candidate speeds) every cost is equal and
// the same holds whatever the queues. The cold bound and ColdBacklog
// belong to the rules and are not read. The cost is computed in one pass
// over the candidates, without allocating.
//
// # Sticky: when edges cannot share placements
//
// Edges of a tier that share placements (sync) learn each other's
// choices, so a conversation placed by one edge's view of the queues is
// followed by every edge on its next turn. While an edge cannot share
// them (Policy.Sticky: its sync channel is down), each edge sees only
// its own share of the queues, and the least cost alone would place a
// conversation's turns differently on each. Sticky, the request leaves
// its home only when the move saves more than a margin:
//
//	cost(home) - cost(least) > max(size, MinDepth * ChunkSize) * Policy.NsPerByte + ttft(least)
//
// that is, more than the request's own prefill (counted as at least the
// shortest match the policy routes on, so that a short request is not
// moved by a queue of a request or two) plus all it is predicted to wait
// and prefill where it goes. With one speed and CacheWeight 0, the move
// must more than halve its predicted time to first token. Since the home
// does not depend on the queues, two edges that each see their own part
// of the queues place a request alike unless the difference one of them
// sees is of the size of the margin. Sticky, the holder above keeps the
// request while q <= 2*s + (1 + CacheWeight) * m, for a request of size
// s above the floor.
//
// # The rules
//
// Without Policy.Cost, the choice follows these rules, in order:
//
//  1. the deepest holder under the bound ([ReasonMatch] when it is the
//     deepest holder overall, [ReasonSpill] when the bound moved the
//     request to a shallower or equally deep but lower-ranked holder);
//  2. with no holder under the bound, the rendezvous-hash winner among the
//     candidates under the bound ([ReasonSpillCold]): the prefix is lost for
//     this request, and recording the choice gives it a second home that
//     every instance agrees on;
//  3. a cold request goes to the rendezvous-hash winner of the
//     placement key ([ReasonCold]) or, if that candidate is over the bound
//     or the cold bound, to the highest-ranked candidate under both
//     ([ReasonColdSpill]), or under the bound alone if none is (only the
//     byte bound can exclude the least loaded);
//  4. last resort, with no candidate under the bound: the least-loaded
//     candidate ([ReasonLeastLoaded]);
//  5. with ColdBacklog, a choice of rule 3 within the cold bound moves to
//     the candidate with the least backlog, as below.
//
// A warm request stays on its deepest holder under the bound whatever is
// queued there; only the bound moves it. The queue reaches cold requests
// alone, through the cold bound and the backlog.
//
// # The cold bound (rules only)
//
// With ColdLoadFactor > 0, a cold request is held to a tighter bound
// besides: a candidate takes it only if
//
//	Load + 1 <= coldBound
//	coldBound = min(bound, ceil(ColdLoadFactor * (sum(Load) + 1) / n))
//
// with no allowance. Spilling a warm request throws its cached prefix
// away, so its bound is loose; a cold request has no cache anywhere to
// lose, and rendezvous hashing alone places new prompt families like balls
// in bins, so some replicas collect more families than their KV caches
// hold. The least-loaded candidate is always within the cold bound (the
// argument of the bound applies with the allowance 0), and on an idle
// fleet every candidate is, so a cold request goes to its rendezvous-hash
// winner whenever that one is not busier than the mean. See
// [Policy.ColdBound]. The cost needs no such bound: it places a cold
// request by the queues it sees.
//
// # The backlog (rules only)
//
// With ColdBacklog, the rules read each candidate's Backlog: the prefill
// it is believed to have queued (the caller estimates it; caddymodule
// drains the uncached prompt of the requests it sent at a configured
// rate). A long prompt placed behind another long prefill waits for all
// of it, so a cold request goes, among the candidates within the bound
// and the cold bound, to the one with the least backlog, the
// rendezvous-hash winner's placement on a tie ([ReasonPrefill] when that
// moves it). With no backlog anywhere nothing moves. The rules never move
// a warm request by the backlog: moving one whenever its holder's queue
// exceeds the prefill its match saves (NVIDIA Dynamo's cost, the cost
// above with CacheWeight 0) loses hit rate (docs/tuning.md has the
// figures); the cost moves one only when the queue outweighs
// 1 + CacheWeight times its match.
//
// # Rendezvous hashing
//
// Every tie is broken by the highest-random-weight (HRW, rendezvous hashing)
// score of the candidate for the placement key:
//
//	score(placement, key) = splitmix64(placement ^ rotl(key, 32))
//
// where splitmix64 is the finalizer of Steele, Lea and Flood's SplittableRandom
// (Stafford's variant 13). For a fixed placement it is a bijection of the key,
// so distinct keys never tie. Because it depends on the request and the
// upstream's Dial alone, independent Caddy instances agree on cold placements
// without talking; distinct conversations spread uniformly over the fleet;
// and removing an upstream moves only the placements it won. The function is
// a compatibility contract between instances and is pinned by a golden test.
// Candidates with equal keys (the same upstream twice) tie, and the lower
// index wins. No randomness is used: the same input gives the same Choice.
package selection
