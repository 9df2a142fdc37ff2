// Package integration holds the integration tests of several Caddy edges
// sharing placements (lb_policy prefix_cache's sync) over a real
// redis-server: real Caddy processes, started by the test binary itself
// (bench/driver's edges), in front of real HTTP backends. Without
// redis-server the tests skip, saying so; with CI=true they fail instead.
package integration
