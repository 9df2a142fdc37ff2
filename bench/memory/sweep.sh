#!/usr/bin/env bash
# body_budget against Caddy's peak resident set and the requests that
# prefix_cache sends to the fallback: 200 concurrent streams with 2 MiB
# prompts through Caddyfile.example, in bursts (every upload at once) and
# in steady arrivals, three runs of each, round_robin beside them in every
# run. Writes OUT.json (raw), OUT.md (the tables) and OUT.log (each cell
# as it ends), OUT defaulting to bench/results/memory/budget-sweep:
#
#	nice -n 19 bench/memory/sweep.sh [OUT]
#
# docs/limitations.md quotes its table.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results/memory/budget-sweep}
{
	echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
	echo "go $(go env GOVERSION), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
} >"$out.log"
bench/memory/run.sh -only load -sizes 2MiB -conc 200 -arrivals burst,steady -runs 3 \
	-body-budget 16MiB,32MiB,64MiB,128MiB,256MiB,1GiB,default \
	-json "$out.json" >"$out.md" 2>>"$out.log"
