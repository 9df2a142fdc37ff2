#!/usr/bin/env bash
# Sweeps options on the tuning set of issue 16 (bench/scoring/sets.sh),
# one option at a time around its default: prefix_cache's tuned options
# and the peers' own knobs (SGLang's cache and balance thresholds,
# Dynamo's prefill weight and overlap credit), each variant beside the
# default in the same prefixbench run. It never touches the scoring set.
#
#	bench/scoring/tune.sh OUTDIR [KNOB...]            # all knobs, ~8 hours
#	bench/scoring/tune.sh -smoke OUTDIR [KNOB...]     # a few minutes
#	bench/scoring/tune.sh -together OUTDIR KNOB...    # the knobs in one sweep
#	bench/scoring/tune.sh OUTDIR KNOB=V1,V2           # other values than the knob's own
#	bench/scoring/tune.sh -procedure OUTDIR [ROUTER...]   # the one tuning procedure
#
# -procedure runs the tuning procedure of docs/peers.md ("Tuning") for
# each ROUTER (none: every router of PROCEDURE_KNOBS in sets.sh): its 8
# variant settings beside its default in the same runs, each knob's value picked
# by peertable -pick, a knob whose pick is at the edge of its range
# extended one step beyond it (up to MAX_EXTEND extra settings per
# router; a categorical knob, such as prefix_cache's choice of cost or
# rules, is never extended), and the router's tuned setting (every knob at its pick)
# written to OUTDIR/tuned.txt as ROUTER_tuned=JSON, one per line, for
# run.sh's TUNED. OUTDIR/tuning.md gathers every pick's table.
#
# -together runs the selected knobs that share a default policy and
# prefixbench flags in one sweep, every variant of each beside the one
# default (and REFS) in the same prefixbench run, named by the knobs
# joined with '+'. It costs one default and one REFS per run instead of
# one per knob, and compares the knobs with each other on the same
# arrivals.
#
# KNOBs are the names below (e.g. min_match_ratio sglang_cache_threshold,
# or engine_capacity and engine_queue, engine_metrics' signals); none
# means all. REFS names policies to run beside each sweep, e.g.
# REFS=peer_dynamo for the reference that knows every engine's cache. OUTDIR gets, per knob, the raw JSON of every workload and
# seed or run, and KNOB.md, peertable's summary of that knob's variants
# against the default; commands.txt and commit.txt as run.sh writes them.
set -euo pipefail
cd "$(dirname "$0")/../.."
TOGETHER=0
PROCEDURE=0
while [[ ${1:-} == -* ]]; do
	case $1 in
	-smoke) export SMOKE=1 ;;
	-together) TOGETHER=1 ;;
	-procedure) PROCEDURE=1 ;;
	*) echo "tune.sh: unknown flag $1" >&2; exit 2 ;;
	esac
	shift
done
[[ $# -ge 1 ]] || { echo "usage: bench/scoring/tune.sh [-smoke] [-together | -procedure] OUTDIR [KNOB... | ROUTER...]" >&2; exit 2; }
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

# tuning_runs PREFIX POLICIES CUSTOM...: the tuning set once with
# POLICIES (maybe empty) and the -custom-policy pairs CUSTOM, into
# PREFIX-NAME-sSEED.json and PREFIX-NAME-rRUN.json; a file already there
# is kept, so that a procedure cut short resumes. RUN_FILES lists them.
tuning_runs() {
	local prefix=$1 policies=$2 w name seed tr r f flags
	shift 2
	RUN_FILES=()
	for w in "${GEN_WORKLOADS[@]}"; do
		name=${w%%|*}
		read -ra flags <<<"${w#*|}"
		for seed in "${TUNING_SEEDS[@]}"; do
			f=$prefix-$name-s$seed.json
			RUN_FILES+=("$f")
			done_cell "$f" && continue
			runlog "$PB" -engines "$ENGINES" -time-scale "$GEN_TS" -policies "$policies" "$@" "${flags[@]}" \
				-seed "$seed" -no-bound -json "$f.tmp" -md "${f%.json}.md"
			mv "$f.tmp" "$f"
		done
	done
	for tr in "${TUNING_TRACES[@]}"; do
		name=${tr%%|*}
		read -ra flags <<<"${tr#*|}"
		for r in $(seq 1 "$MC_RUNS"); do
			f=$prefix-$name-r$r.json
			RUN_FILES+=("$f")
			done_cell "$f" && continue
			runlog "$PB" -engines "$ENGINES" -time-scale "$MC_TS" -kv-blocks "$MC_KV" -policies "$policies" "$@" "${flags[@]}" \
				-seed $((MC_TUNING_SEED_BASE + r)) -no-bound -json "$f.tmp" -md "${f%.json}.md"
			mv "$f.tmp" "$f"
		done
	done
}

# procedure ROUTER: the tuning procedure for one router.
procedure() {
	local router=$1 entry r knob def values bounds v custom=() knobs=()
	declare -A kdef kbounds
	for entry in "${PROCEDURE_KNOBS[@]}"; do
		IFS='|' read -r r knob def values bounds <<<"$entry"
		[[ $r == "$router" ]] || continue
		knobs+=("$knob")
		kdef[$knob]=$def
		kbounds[$knob]=$bounds
		for v in $values; do
			custom+=(-custom-policy "$router-$knob-$v=$(spec_json "$router" "$knob=$(knob_json "$bounds" "$v")")")
		done
	done
	[[ ${#knobs[@]} -gt 0 ]] || { echo "tune.sh: no knob of router $router in PROCEDURE_KNOBS" >&2; exit 2; }
	tuning_runs "$OUT/$router" "$router" "${custom[@]}"
	local base_files=("${RUN_FILES[@]}") extended=0 picks=() line next range
	for knob in "${knobs[@]}"; do
		local files=("${base_files[@]}") x=0
		# A categorical knob (no bounds) has no range to extend.
		range=()
		[[ -z ${kbounds[$knob]} ]] || range=(-range "${kbounds[$knob]}")
		while :; do
			runlog "$OUT/.bin/peertable" -pick "$router" -knob "$knob" -default "${kdef[$knob]}" "${range[@]}" \
				"${files[@]}" >"$OUT/$router-$knob.pick.md"
			next=$(sed -n 's/^next: //p' "$OUT/$router-$knob.pick.md")
			[[ -n $next && $extended -lt $MAX_EXTEND ]] || break
			# The pick is at the edge of the range: one more value beyond.
			extended=$((extended + 1))
			x=$((x + 1))
			tuning_runs "$OUT/$router-$knob-x$x" "" -custom-policy "$router-$knob-$next=$(spec_json "$router" "$knob=$next")"
			files+=("${RUN_FILES[@]}")
		done
		line=$(sed -n 's/^picked: //p' "$OUT/$router-$knob.pick.md")
		[[ $line == "${kdef[$knob]}" ]] || picks+=("$knob=$(knob_json "${kbounds[$knob]}" "$line")")
		cat "$OUT/$router-$knob.pick.md" >>"$OUT/tuning.md.tmp"
		echo >>"$OUT/tuning.md.tmp"
	done
	echo "${router}_tuned=$(spec_json "$router" "${picks[@]}")" >>"$OUT/tuned.txt.tmp"
}

if [[ $PROCEDURE == 1 ]]; then
	routers=("$@")
	if [[ ${#routers[@]} == 0 ]]; then
		for entry in "${PROCEDURE_KNOBS[@]}"; do
			r=${entry%%|*}
			[[ " ${routers[*]} " == *" $r "* ]] || routers+=("$r")
		done
	fi
	: >"$OUT/tuned.txt.tmp"
	: >"$OUT/tuning.md.tmp"
	for r in "${routers[@]}"; do
		procedure "$r"
	done
	mv "$OUT/tuned.txt.tmp" "$OUT/tuned.txt"
	mv "$OUT/tuning.md.tmp" "$OUT/tuning.md"
	echo "tuning procedure done: $OUT/tuned.txt" >&2
	exit 0
fi

# A KNOB may be given as KNOB=V1,V2,...: those values replace its own,
# to extend a sweep whose best value was at the edge of its range.
SELECTED=("$@")
selected_values=
selected() {
	selected_values=
	[[ ${#SELECTED[@]} == 0 ]] && return 0
	local w
	for w in "${SELECTED[@]}"; do
		if [[ ${w%%=*} == "$1" ]]; then
			[[ $w != *=* ]] || selected_values=${w#*=}
			return 0
		fi
	done
	return 1
}

# sweep NAME BASE FLAGS NAMES CUSTOM...: one sweep, every workload of the
# tuning set with the variants in CUSTOM (-custom-policy pairs) beside
# the default BASE, summarised in NAME.md.
sweep() {
	local knob=$1 base=$2 names=$4 w name seed tr r f
	local knobflags
	read -ra knobflags <<<"$3"
	shift 4
	local custom=("$@")
	# REFS (e.g. peer_dynamo, the reference) run beside each sweep.
	local policies=$base
	[[ -z ${REFS:-} ]] || policies+=",$REFS"
	local files=() flags
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
				-seed $((MC_TUNING_SEED_BASE + r)) -no-bound -json "$f" -md "${f%.json}.md"
			files+=("$f")
		done
	done
	runlog "$OUT/.bin/peertable" -lead "$base" -policies "$names${REFS:+,$REFS}" -min-runs "${#TUNING_SEEDS[@]}" "${files[@]}" >"$OUT/$knob.md"
}

# Each selected knob's variants, grouped (with -together) by default
# policy and flags, in the order of KNOBS.
groups=()
declare -A gknobs gbase gflags gnames gcustom
for entry in "${KNOBS[@]}"; do
	IFS='|' read -r knob base prefix values suffix flags <<<"$entry"
	selected "$knob" || continue
	[[ -z $selected_values ]] || values=${selected_values//,/ }
	suffix=${suffix:-\}}
	key=$knob
	[[ $TOGETHER == 0 ]] || key="$base|${flags:-}"
	if [[ -z ${gknobs[$key]:-} ]]; then
		groups+=("$key")
		gknobs[$key]=$knob
		gbase[$key]=$base
		gflags[$key]=${flags:-}
		gnames[$key]=$base
		gcustom[$key]=
	else
		gknobs[$key]+="+$knob"
	fi
	for v in $values; do
		# Specs hold no newline: one per line.
		gcustom[$key]+="$base-$knob-$v=$prefix$v$suffix"$'\n'
		gnames[$key]+=",$base-$knob-$v"
	done
done
for key in "${groups[@]}"; do
	custom=()
	while IFS= read -r spec; do
		[[ -n $spec ]] && custom+=(-custom-policy "$spec")
	done <<<"${gcustom[$key]}"
	sweep "${gknobs[$key]}" "${gbase[$key]}" "${gflags[$key]}" "${gnames[$key]}" "${custom[@]}"
done
echo "tuning sweeps done: $OUT/*.md" >&2
