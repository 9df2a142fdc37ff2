#!/usr/bin/env bash
# End-to-end overhead of lb_policy prefix_cache against round_robin
# (issue 7, docs/overhead.md): builds Caddy with this module and the
# trivial backend, installs wrk if it is missing, and runs the A/B driver
# (bench/cmd/overhead). Extra arguments go to the driver, e.g.
#
#	bench/overhead/run.sh -rounds 4 -duration 10s
#	bench/overhead/run.sh -sizes 32KB -pin=false
#
# Caddy, the backend and wrk are three processes; by default Caddy is
# pinned to CPU 1 and wrk and the backend to CPU 0.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v wrk >/dev/null; then
	echo "installing wrk" >&2
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/caddy" ./cmd/caddy
go build -o "$bin/backend" ./bench/cmd/backend
go run ./bench/cmd/overhead -caddy "$bin/caddy" -backend "$bin/backend" "$@"
