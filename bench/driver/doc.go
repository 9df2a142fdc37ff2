// Package driver runs the benchmark: it starts a fleet of simulated engines
// (bench/engine) and a real Caddy in the same process, configured from a
// Caddyfile with the load-balancing policy under test, replays a workload
// (bench/workload) through Caddy over real HTTP, open-loop at a ladder of
// request rates or closed-loop with a number of users, and measures what a
// client sees: time to first token from the SSE stream, end-to-end time,
// prompt and cached tokens from the usage chunk, errors, and the upstream
// that served each request. It samples the engines' /metrics for their
// queue depth while it runs, and computes the upper bound of the token hit
// rate by replaying the same requests into one engine whose cache never
// evicts.
//
// Every policy runs on a fresh fleet and a freshly loaded Caddy, so no
// policy inherits another's warm caches.
//
// Times in results are simulated seconds: wall time divided by the
// engines' TimeScale.
package driver
