#!/usr/bin/env bash
# The multi-edge matrix of issue 15: shared-prefix, chat, agent and
# Mooncake through 1, 2, 4 and 8 Caddy edges, each edge learning alone and
# syncing placements through Redis, for several seeds. One JSON file per
# (workload, edges, sync, seed) in $OUT; a file already there is kept, so
# an interrupted matrix resumes where it stopped.
#
#   bash bench/edges/run.sh                          # everything, ~3 h on 2 cores
#   SEEDS=1 EDGES="1 4" WORKLOADS=chat bash bench/edges/run.sh
#
# mooncake is the conversation trace with the requests of each 3-s
# timestamp spread over it, in trace order (prefixbench's default).
# WORKLOADS may also name mooncake-burst, the same trace with each
# timestamp's requests sent at once (a stress case), mooncake-spread,
# the same as mooncake under that name, and mooncake-synthetic,
# Mooncake's synthetic trace (Poisson arrivals), which the default
# matrix leaves out.
#
# GEN_TS and MC_TS override the time scales (0.5 and 0.2): at 1 the
# engines run in real time, and the edges' own wall-clock intervals (load
# reports every 100 ms, scrapes) weigh as they would in production rather
# than 2x or 5x more. CUSTOM adds prefix_cache variants to every run but
# the e1p ones, as prefixbench -custom-policy specs separated by ';':
#
#   OUT=/tmp/edges-ts1 GEN_TS=1 EDGES="1 4" WORKLOADS=agent bash bench/edges/run.sh
#   CUSTOM='pc_noload={"policy":"prefix_cache","sync_load":false}' EDGES=4 bash bench/edges/run.sh
#
# SENT=1 sends every request to the first edge of the N, the others
# running idle (and applying what it publishes): the CPU of N edges on
# this one machine with one edge's routing, in files named e4to1:
#
#   OUT=/tmp/edges-sent SENT=1 EDGES=4 SYNCS=redis WORKLOADS="chat mooncake" bash bench/edges/run.sh
#
# Without sync, round_robin runs beside prefix_cache (it has nothing to
# sync). With one edge, prefix_cache runs a second time as a child
# process (-edge-process, the e1p files), the layout of N edges, so that
# the process split can be told apart from learning alone. -sync redis
# needs redis-server (apt-get install redis-server) and a prefix_cache
# that knows its sync option.
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${OUT:-/tmp/edges}
SEEDS=${SEEDS:-"1 2 3"}
EDGES=${EDGES:-"1 2 4 8"}
WORKLOADS=${WORKLOADS:-"shared-prefix chat agent mooncake"}
SYNCS=${SYNCS:-"none redis"}
GEN_TS=${GEN_TS:-0.5}
MC_TS=${MC_TS:-0.2}
CUSTOM=${CUSTOM:-}
SENT=${SENT:-}
mkdir -p "$OUT"
go build -o "$OUT/prefixbench" ./bench/cmd/prefixbench

# The settings of the peer comparison (docs/peers.md), so that the
# one-edge rows are comparable with it.
workload_args() {
	case $1 in
	shared-prefix) echo "-time-scale $GEN_TS -workload shared-prefix -requests 800 -qps 30,80" ;;
	chat) echo "-time-scale $GEN_TS -workload chat -requests 60 -qps 20" ;;
	agent) echo "-time-scale $GEN_TS -workload agent -requests 60 -qps 20" ;;
	mooncake) echo "-time-scale $MC_TS -workload mooncake -mooncake-duration 10m -kv-blocks 25000 -mooncake-spread 3s" ;;
	# The conversation trace's bursts as published: each timestamp's
	# requests (~10, up to 28) at once.
	mooncake-burst) echo "-time-scale $MC_TS -workload mooncake -mooncake-duration 10m -kv-blocks 25000 -mooncake-spread 0 -workload-name mooncake-burst" ;;
	# The whole synthetic trace, whose arrivals are Poisson: the
	# conversation trace's timestamps fall on a 3-second grid, so ~10 of
	# its requests arrive at once every 3 s.
	mooncake-synthetic) echo "-time-scale $MC_TS -workload mooncake -mooncake ../shared/data/mooncake/synthetic_trace.jsonl -mooncake-duration 0 -kv-blocks 25000 -mooncake-spread 0 -workload-name mooncake-synthetic" ;;
	# The conversation trace with each grid step's requests spread over
	# its 3 s, in their order, rather than sent at once.
	mooncake-spread) echo "-time-scale $MC_TS -workload mooncake -mooncake-duration 10m -kv-blocks 25000 -mooncake-spread 3s -workload-name mooncake-spread" ;;
	*) echo "unknown workload $1" >&2; exit 2 ;;
	esac
}

run() { # name, then prefixbench's arguments
	local name=$1
	shift
	if [ -s "$OUT/$name.json" ]; then
		echo "== $name: kept"
		return
	fi
	echo "== $name: $*"
	local t0=$SECONDS
	local rc=0
	"$OUT/prefixbench" "$@" -json "$OUT/$name.json.tmp" -md "$OUT/$name.md" >"$OUT/$name.log" 2>&1 || rc=$?
	grep '^\[' "$OUT/$name.log" || true
	if [ "$rc" != 0 ]; then
		echo "== $name failed ($rc): see $OUT/$name.log" >&2
		tail -5 "$OUT/$name.log" >&2
		exit "$rc"
	fi
	mv "$OUT/$name.json.tmp" "$OUT/$name.json"
	echo "== $name: $((SECONDS - t0)) s"
}

# prefixbench runs each -custom-policy after -policies.
custom=()
IFS=';' read -ra specs <<<"$CUSTOM"
for spec in "${specs[@]}"; do
	[ -n "$spec" ] || continue
	custom+=(-custom-policy "$spec")
done

for seed in $SEEDS; do
	for edges in $EDGES; do
		tier=e$edges
		sent=()
		if [ -n "$SENT" ]; then
			tier+=to$SENT
			sent=(-edges-sent "$SENT")
		fi
		for w in $WORKLOADS; do
			args=$(workload_args "$w")
			for sync in $SYNCS; do
				if [ "$sync" = none ]; then
					# shellcheck disable=SC2086
					run "$w-$tier-none-s$seed" $args -seed "$seed" -edges "$edges" "${sent[@]}" -policies round_robin,prefix_cache "${custom[@]}"
					if [ "$edges" = 1 ]; then
						# shellcheck disable=SC2086
						run "$w-e1p-none-s$seed" $args -seed "$seed" -edges 1 -edge-process -policies prefix_cache -no-bound
					fi
				else
					# shellcheck disable=SC2086
					run "$w-$tier-$sync-s$seed" $args -seed "$seed" -edges "$edges" "${sent[@]}" -sync "$sync" -policies prefix_cache "${custom[@]}"
				fi
			done
		done
	done
done
echo "done: $OUT"
