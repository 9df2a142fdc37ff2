#!/usr/bin/env bash
# The refereed race, in one place: every figure of the peer comparison
# that README.md, BENCHMARKS.md and docs/ cite, regenerated at the
# current commit from raw files this script writes.
#
#	bench/race/run.sh bench/results/race   # the whole race: many hours, on a quiet machine
#	bench/race/run.sh OUTDIR               # the same, anywhere
#	bench/race/run.sh -smoke OUTDIR        # the whole pipeline on tiny sets, ~2 minutes
#
# 1. OUTDIR/tuning: bench/scoring/tune.sh -procedure, the one tuning
#    procedure for every router on the tuning set (docs/peers.md,
#    "Tuning"): each pick's table in tuning.md, the tuned settings in
#    tuned.txt.
# 2. OUTDIR/scoring: bench/scoring/run.sh with TUNED=tuned.txt, every
#    router at its tuned setting on the scoring set (held-out RAG
#    workload included), and prefix_cache at its default too:
#    summary.md (paired verdicts, prefix_cache as shipped leading,
#    peer_dynamo_tuned the reference) and summary.svg.
# 3. OUTDIR/frontier.md and frontier.svg: prefix_cache's trade-off knob
#    (FRONTIER_KNOB in sets.sh), as the procedure swept it, beside every
#    peer setting it swept, on the tuning set: peertable -frontier, the
#    peer settings with both a higher hit rate and a lower TTFT p90 than
#    one of prefix_cache's, paired seed by seed.
# 4. OUTDIR/race.md: the commit, once, then the tuned settings, the
#    scoring summary, the frontier and the tuning tables.
#
# Every prefixbench run records its timer lag (timer_lag_ms in the raw
# JSON, the last column of the summaries): how late a goroutine woke
# from a 10 ms sleep, the measure of a machine too busy for the figures.
# It runs niced. Run again on the same OUTDIR from a clean tree with the
# same code, it resumes: cells whose raw JSON exists are kept; from other
# code, or a dirty tree, it refuses. The code is the commit's files
# outside bench/results, test files aside (bench/scoring/sets.sh,
# same_code), so a race run in bench/results/race whose finished cells
# were committed when a sitting ended resumes from that later commit, on
# a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/../.."
smoke=()
if [[ ${1:-} == -smoke ]]; then
	smoke=(-smoke)
	shift
fi
[[ $# == 1 ]] || { echo "usage: bench/race/run.sh [-smoke] OUTDIR" >&2; exit 2; }
OUT=$1
mkdir -p "$OUT"

# One commit for every file: recorded once, checked on a resume (tune.sh
# and run.sh check their own directories the same way). A resume may
# come from a later commit that only adds result files or changes test
# files: the cells committed from a sitting cut short, a test fixed.
[[ ${#smoke[@]} == 0 ]] || SMOKE=1
source bench/scoring/sets.sh
start_or_resume "$OUT"
# From a clean tree, its directories name its start commit too,
# whichever later commit begins them (scoring may begin sittings after
# tuning): tune.sh and run.sh take them as runs to resume, and same_code
# holds each to the race's code. A race from a dirty tree never resumes,
# and its directories record their own tree.
if ! grep -q '^dirty: ' "$OUT/commit.txt"; then
	for d in tuning scoring; do
		[[ -f $OUT/$d/commit.txt ]] || { mkdir -p "$OUT/$d" && cp "$OUT/commit.txt" "$OUT/$d/"; }
	done
fi

renice -n 10 $$ >/dev/null 2>&1 || true # the children inherit it

# same_tree DIR refuses DIR's files unless they were built from the
# race's tree: a commit made while the race ran would mix builds.
same_tree() {
	if ! cmp -s "$1/commit.txt" "$OUT/commit.txt"; then
		echo "$1 was built from $(head -1 "$1/commit.txt"), not the race's $(head -1 "$OUT/commit.txt")" >&2
		exit 1
	fi
}

bash bench/scoring/tune.sh "${smoke[@]}" -procedure "$OUT/tuning"
same_tree "$OUT/tuning"
TUNED=$OUT/tuning/tuned.txt bash bench/scoring/run.sh "${smoke[@]}" "$OUT/scoring"
same_tree "$OUT/scoring"

# The frontier knob's default, as the procedure swept it.
def=
for entry in "${PROCEDURE_KNOBS[@]}"; do
	IFS='|' read -r r knob d _ <<<"$entry"
	[[ $r/$knob != prefix_cache/$FRONTIER_KNOB ]] || def=$d
done
[[ -n $def ]] || { echo "race: prefix_cache's $FRONTIER_KNOB is not in PROCEDURE_KNOBS" >&2; exit 1; }
# Each router's files in seed order (the glob's), as the pairing needs.
"$OUT/tuning/.bin/peertable" -frontier prefix_cache -knob "$FRONTIER_KNOB" -default "$def" \
	-svg "$OUT/frontier.svg" "$OUT"/tuning/*.json >"$OUT/frontier.md"

{
	echo "# The race at $(head -1 "$OUT/commit.txt")"
	echo
	if grep -q '^dirty: ' "$OUT/commit.txt"; then
		echo "From a tree with uncommitted changes: these figures name no commit."
		echo
	elif [[ $(git rev-parse HEAD) != "$(head -1 "$OUT/commit.txt")" ]]; then
		echo "The commits after it, up to the one that holds this file, change nothing that a run builds: they hold the race's cells as it ran, and at most Go test files."
		echo
	fi
	if [[ ${#smoke[@]} -gt 0 ]]; then
		echo "A smoke run: tiny sets that check the pipeline; its figures mean nothing."
		echo
	fi
	echo "Every figure below comes from the raw JSON under tuning/ and scoring/, written by \`bench/race/run.sh\` at this commit."
	echo
	echo "## Tuned settings"
	echo
	echo '```'
	cat "$OUT/tuning/tuned.txt"
	echo '```'
	echo
	echo "## Scoring set"
	echo
	cat "$OUT/scoring/summary.md"
	echo
	echo "## Frontier on the tuning set"
	echo
	cat "$OUT/frontier.md"
	echo
	echo "## Tuning"
	echo
	cat "$OUT/tuning/tuning.md"
} >"$OUT/race.md"
echo "race done: $OUT/race.md" >&2
