#!/usr/bin/env bash
# Sweeps options on the tuning set of issue 16 (bench/scoring/sets.sh),
# one option at a time around its default: prefix_cache's tuned options
# and the peers' own knobs (SGLang's cache and balance thresholds,
# Dynamo's prefill weight and overlap credit), each variant beside the
# default in the same prefixbench run. It never touches the scoring set.
#
#	bench/scoring/tune.sh OUTDIR [KNOB...]         # all knobs, ~8 hours
#	bench/scoring/tune.sh -smoke OUTDIR [KNOB...]  # a few minutes
#
# KNOBs are the names below (e.g. min_match_ratio sglang_cache_threshold,
# or engine_capacity and engine_queue, engine_metrics' signals); none
# means all. REFS names policies to run beside each sweep, e.g.
# REFS=peer_dynamo for the reference that knows every engine's cache. OUTDIR gets, per knob, the raw JSON of every workload and
# seed or run, and KNOB.md, peertable's summary of that knob's variants
# against the default; commands.txt and commit.txt as run.sh writes them.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ${1:-} == -smoke ]]; then
	export SMOKE=1
	shift
fi
[[ $# -ge 1 ]] || { echo "usage: bench/scoring/tune.sh [-smoke] OUTDIR [KNOB...]" >&2; exit 2; }
OUT=$1
shift
source bench/scoring/sets.sh
build "$OUT"
PB=$OUT/.bin/prefixbench

# prefix_cache as Caddyfile.example configures it, spelled out so that a
# variant changes exactly one option.
PC_BASE='"policy":"prefix_cache","load_factor":1.25,"load_allowance":16,"min_match":1024,"prefill_rate":65536,"fallback":{"policy":"least_conn"}'

# knob|default policy|JSON prefix of a variant|values other than the default[|suffix, default }[|prefixbench flags]]
KNOBS=(
	"min_match_ratio|prefix_cache|{$PC_BASE,\"min_match_ratio\":|0.1 0.2 0.5"
	"load_allowance_bytes|prefix_cache|{$PC_BASE,\"load_allowance_bytes\":|65536 262144 524288"
	"cold_load_factor|prefix_cache|{$PC_BASE,\"cold_load_factor\":|0 1.1 1.25"
	"prefill_rate|prefix_cache|{\"policy\":\"prefix_cache\",\"load_factor\":1.25,\"load_allowance\":16,\"min_match\":1024,\"fallback\":{\"policy\":\"least_conn\"},\"prefill_rate\":|0 32768 131072"
	"sglang_cache_threshold|peer_sglang|{\"policy\":\"peer_sglang\",\"cache_threshold\":|0.1 0.5 0.7"
	"sglang_balance_abs_threshold|peer_sglang|{\"policy\":\"peer_sglang\",\"balance_abs_threshold\":|16 32 128"
	"sglang_balance_rel_threshold|peer_sglang|{\"policy\":\"peer_sglang\",\"balance_rel_threshold\":|1.1 1.25 2"
	"dynamo_prefill_load_scale|peer_dynamo|{\"policy\":\"peer_dynamo\",\"prefill_load_scale\":|0.5 2 4"
	"dynamo_overlap_score_credit|peer_dynamo|{\"policy\":\"peer_dynamo\",\"overlap_score_credit\":|0.5 1.5 2"
	# engine_metrics' signals (off by default), each alone: the engines'
	# KV capacity as they publish it, the same corrected by their answers
	# (prefix_cache_usage in front of the proxy, -usage, for every policy
	# of the run), their queues, and their measured prefill speeds. The driver scales the default 1 s
	# scrape interval by the time scale, as it does prefill_rate.
	"engine_capacity|prefix_cache|{$PC_BASE,\"engine_metrics\":{\"queue\":false,\"capacity\":|true|}}"
	"engine_capacity_answers|prefix_cache|{$PC_BASE,\"engine_metrics\":{\"queue\":false,\"capacity\":|true|}}|-usage"
	"engine_queue|prefix_cache|{$PC_BASE,\"engine_metrics\":{\"queue\":|true|}}"
	"engine_prefill|prefix_cache|{$PC_BASE,\"engine_metrics\":{\"queue\":false,\"prefill\":|true|}}"
)
if [[ ${SMOKE:-0} == 1 ]]; then
	KNOBS=("min_match_ratio|prefix_cache|{$PC_BASE,\"min_match_ratio\":|0.5"
		"dynamo_prefill_load_scale|peer_dynamo|{\"policy\":\"peer_dynamo\",\"prefill_load_scale\":|2")
fi

SELECTED=("$@")
selected() {
	[[ ${#SELECTED[@]} == 0 ]] && return 0
	local w
	for w in "${SELECTED[@]}"; do [[ $w == "$1" ]] && return 0; done
	return 1
}

for entry in "${KNOBS[@]}"; do
	IFS='|' read -r knob base prefix values suffix flags <<<"$entry"
	read -ra knobflags <<<"${flags:-}"
	selected "$knob" || continue
	suffix=${suffix:-\}}
	custom=()
	names=$base
	for v in $values; do
		custom+=(-custom-policy "$base-$knob-$v=$prefix$v$suffix")
		names+=",$base-$knob-$v"
	done
	# REFS (e.g. peer_dynamo, the reference) run beside each sweep.
	policies=$base
	[[ -z ${REFS:-} ]] || policies+=",$REFS"
	files=()
	for w in "${GEN_WORKLOADS[@]}"; do
		name=${w%%|*}
		read -ra flags <<<"${w#*|}"
		for seed in "${TUNING_SEEDS[@]}"; do
			f=$OUT/$knob-$name-s$seed.json
			runlog "$PB" -engines "$ENGINES" -time-scale "$GEN_TS" -policies "$policies" "${custom[@]}" "${knobflags[@]}" "${flags[@]}" \
				-seed "$seed" -no-bound -json "$f" -md "${f%.json}.md"
			files+=("$f")
		done
	done
	for tr in "${TUNING_TRACES[@]}"; do
		name=${tr%%|*}
		read -ra flags <<<"${tr#*|}"
		for r in $(seq 1 "$MC_RUNS"); do
			f=$OUT/$knob-$name-r$r.json
			runlog "$PB" -engines "$ENGINES" -time-scale "$MC_TS" -kv-blocks "$MC_KV" -policies "$policies" "${custom[@]}" "${knobflags[@]}" "${flags[@]}" \
				-no-bound -json "$f" -md "${f%.json}.md"
			files+=("$f")
		done
	done
	runlog "$OUT/.bin/peertable" -lead "$base" -policies "$names${REFS:+,$REFS}" -min-runs "${#TUNING_SEEDS[@]}" "${files[@]}" >"$OUT/$knob.md"
done
echo "tuning sweeps done: $OUT/*.md" >&2
