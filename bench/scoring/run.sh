#!/usr/bin/env bash
# Runs the scoring set (bench/scoring/sets.sh) once: every policy of
# $POLICIES on the scoring seeds of the generated workloads and the
# held-out one, and $MC_RUNS times on each scoring trace window, then
# summarises them.
#
#	bench/scoring/run.sh OUTDIR          # the whole set, ~4 hours
#	bench/scoring/run.sh -smoke OUTDIR   # a few minutes, to check the pipeline
#
# Run again on the same OUTDIR, from the same commit, it resumes: cells
# whose JSON exists are kept, the others run.
#
# TUNED names a file of tuned settings, ROUTER_tuned=JSON per line (what
# tune.sh -procedure writes): they run in place of the peers' defaults
# (beside them with DEFAULTS=1). prefix_cache runs at its default, as
# Caddyfile.example ships it, which the summary leads with, and at its
# tuned setting unless that is the default; peer_dynamo_tuned is the
# reference:
#
#	TUNED=results-tuning/tuned.txt bench/scoring/run.sh OUTDIR
#
# EXTRA runs other policies on the same set instead of $POLICIES, given
# as prefixbench -custom-policy specs separated by ';' (peers tuned on
# the tuning set, or prefix_cache with an option on), into an OUTDIR of
# their own; peertable over both directories puts them side by side:
#
#	EXTRA='sglang_tuned={"policy":"peer_sglang","cache_threshold":0.5}' bench/scoring/run.sh OUTDIR2
#
# OUTDIR gets one raw prefixbench JSON (and markdown) per workload and seed
# or run, commands.txt (every command, in order), commit.txt (the tree the
# binaries were built from), and summary.md / summary.svg from peertable
# (-lead prefix_cache -reference peer_dynamo). Run it on a quiet machine:
# the runs are timed.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ${1:-} == -smoke ]]; then
	export SMOKE=1
	shift
fi
[[ $# == 1 ]] || { echo "usage: bench/scoring/run.sh [-smoke] OUTDIR" >&2; exit 2; }
OUT=$1
source bench/scoring/sets.sh
build "$OUT"
PB=$OUT/.bin/prefixbench
run_policies=$POLICIES
custom=()
extra_bound=()
LEAD=prefix_cache
if [[ -n ${TUNED:-} ]]; then
	# The tuned settings, ROUTER_tuned=JSON per line (tune.sh
	# -procedure's tuned.txt), in place of the peers' defaults (beside
	# them with DEFAULTS=1); prefix_cache's default runs either way.
	[[ ${DEFAULTS:-0} == 1 ]] || { run_policies=prefix_cache; POLICIES=prefix_cache; }
	while IFS= read -r spec; do
		[[ -n $spec ]] || continue
		# prefix_cache tuned to its default is prefix_cache: run once.
		[[ $spec != "prefix_cache_tuned=$(spec_json prefix_cache)" ]] || continue
		custom+=(-custom-policy "$spec")
		POLICIES+="${POLICIES:+,}${spec%%=*}"
	done <"$TUNED"
	REFERENCE=${REFERENCE}_tuned
fi
if [[ -n ${EXTRA:-} ]]; then
	run_policies= # the custom policies alone
	POLICIES=
	IFS=';' read -ra specs <<<"$EXTRA"
	for spec in "${specs[@]}"; do
		[[ -n $spec ]] || continue
		custom+=(-custom-policy "$spec")
		POLICIES+="${POLICIES:+,}${spec%%=*}"
	done
	extra_bound=(-no-bound) # the main run has each workload's bound
fi

for w in "${GEN_WORKLOADS[@]}" "${HELDOUT_WORKLOADS[@]}"; do
	name=${w%%|*}
	read -ra flags <<<"${w#*|}"
	for seed in "${SCORING_SEEDS[@]}"; do
		done_cell "$OUT/$name-s$seed.json" && continue
		runlog "$PB" -engines "$ENGINES" -time-scale "$GEN_TS" -policies "$run_policies" "${custom[@]}" "${extra_bound[@]}" "${flags[@]}" \
			-seed "$seed" -json "$OUT/$name-s$seed.json.tmp" -md "$OUT/$name-s$seed.md"
		mv "$OUT/$name-s$seed.json.tmp" "$OUT/$name-s$seed.json" # a cell's JSON exists only once it has run whole
	done
done
for tr in "${SCORING_TRACES[@]}"; do
	name=${tr%%|*}
	read -ra flags <<<"${tr#*|}"
	for r in $(seq 1 "$MC_RUNS"); do
		bound=()
		[[ $r == 1 ]] || bound=(-no-bound) # the upper bound is the trace's, computed once
		done_cell "$OUT/$name-r$r.json" && continue
		runlog "$PB" -engines "$ENGINES" -time-scale "$MC_TS" -kv-blocks "$MC_KV" -policies "$run_policies" "${custom[@]}" "${extra_bound[@]}" "${flags[@]}" \
			-seed $((MC_SCORING_SEED_BASE + r)) "${bound[@]}" -json "$OUT/$name-r$r.json.tmp" -md "$OUT/$name-r$r.md"
		mv "$OUT/$name-r$r.json.tmp" "$OUT/$name-r$r.json"
	done
done

if [[ -n ${EXTRA:-} ]]; then
	echo "extra policies done: summarise them with the main run, peertable -lead prefix_cache ... MAIN/*.json $OUT/*.json" >&2
	exit 0
fi
runlog "$OUT/.bin/peertable" -lead "$LEAD" -reference "$REFERENCE" -policies "$POLICIES" -min-runs "${#SCORING_SEEDS[@]}" \
	-svg "$OUT/summary.svg" "$OUT"/*.json >"$OUT/summary.md"
echo "scoring set done: $OUT/summary.md" >&2
