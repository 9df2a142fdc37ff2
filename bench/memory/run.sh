#!/usr/bin/env bash
# Memory held for request bodies by lb_policy prefix_cache against stock
# policies, in a real Caddy process (issues 18 and 19): builds Caddy with
# this module and runs the driver (bench/cmd/membench). Extra
# arguments go to the driver, e.g.
#
#	bench/memory/run.sh -json bench/results/memory/latest.json
#	bench/memory/run.sh -sizes 2MiB -conc 200 -only load
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/caddy" ./cmd/caddy
go run ./bench/cmd/membench -caddy "$bin/caddy" "$@"
