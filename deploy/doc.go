// Package deploy holds what operators deploy beside the module: the
// Prometheus recording rules and alerts (deploy/prometheus), the Grafana
// dashboard (deploy/grafana), and their tests. It has no Go API; its
// tests run promtool on the rules and run a real Prometheus, with those
// rules, scraping a real edge tier of Caddy in front of simulated engines
// (docs/operations.md).
package deploy
