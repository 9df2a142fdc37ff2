# The tuning and scoring sets, defined once. Sourced (from the
# repository root) by run.sh, which runs the scoring set, and tune.sh,
# which sweeps options on the tuning set. Defaults are chosen on the
# tuning set only and reported on the scoring set, which shares no seed
# and no trace window with it.
#
# SMOKE=1 shrinks every set to a few seconds per run, to check the
# pipeline; its figures mean nothing.

TRACES=${TRACES:-../shared/data/mooncake}
CONV=$TRACES/conversation_trace.jsonl
SYNTH=$TRACES/synthetic_trace.jsonl

ENGINES=8

# Generated workloads run at half speed on the default engines (65,536
# tokens of KV each); Mooncake at a fifth of real time on engines of
# 400,000 tokens (25,000 blocks), as in the earlier rounds.
GEN_TS=0.5
MC_TS=0.2
MC_KV=25000

# Every Mooncake cell is run MC_RUNS times, run r with seed
# MC_SEED_BASE+r, which draws the spread of the conversation trace's
# timestamps (the tuning runs use seeds 1-5, the scoring runs 21-25).
MC_RUNS=5
MC_TUNING_SEED_BASE=0
MC_SCORING_SEED_BASE=20

# The scoring set's policies: prefix_cache as Caddyfile.example
# configures it, and every peer at its upstream's defaults (bench/peers);
# peer_dynamo, fed the engines' KV events, is the reference that knows
# every engine's cache.
POLICIES=prefix_cache,peer_sglang,peer_llmd,peer_kubeai,peer_vllmstack,peer_dynamo,peer_dynamo_approx
REFERENCE=peer_dynamo

# Generated workloads: name|prefixbench flags. A seed makes the workload.
GEN_WORKLOADS=(
	"shared|-workload shared-prefix -requests 800 -qps 30,80"
	"agent|-workload agent -requests 60 -qps 20"
	"chat|-workload chat -requests 60 -qps 20"
)
# The held-out workload, in the scoring set only and never tuned on:
# retrieval-augmented sessions (workload.DefaultRAG: a 500-token system
# prompt, 4 of 500 documents of 200-500 tokens by Zipf(1) popularity in
# retrieval order, a 50-token question, 0-3 follow-ups of 30 tokens after
# a mean 8 s think, 120-token answers), 100 sessions at 20 and 40 QPS.
HELDOUT_WORKLOADS=(
	"rag|-workload rag -requests 100 -qps 20,40"
)
# Five seeds per cell everywhere (peertable gives no verdict on fewer);
# the scoring seeds share none with the tuning seeds.
TUNING_SEEDS=(1 2 3 4 5)
SCORING_SEEDS=(21 22 23 24 25)

# Mooncake traces: name|prefixbench flags. The tuning set is the first
# 10 minutes of the conversation trace; the scoring set a later 10
# minutes of it (30m-40m) and the whole synthetic trace (17 minutes).
# The conversation trace's timestamps sit on a 3 s grid (1,180
# timestamps for 12,031 requests, up to 28 at one): it is replayed with
# each timestamp's requests spread over its 3 s step, in trace order,
# drawn by the seed (-mooncake-spread 3s). Its burst replay, every
# timestamp's requests at once, is a named stress workload of the
# scoring set (mooncake-w30m-burst), reported beside it; it tunes
# nothing.
TUNING_TRACES=(
	"mooncake|-workload mooncake -mooncake $CONV -mooncake-start 0s -mooncake-duration 10m -mooncake-spread 3s"
)
SCORING_TRACES=(
	"mooncake-w30m|-workload mooncake -mooncake $CONV -mooncake-start 30m -mooncake-duration 10m -mooncake-spread 3s -workload-name mooncake-w30m"
	"mooncake-w30m-burst|-workload mooncake -mooncake $CONV -mooncake-start 30m -mooncake-duration 10m -mooncake-spread 0 -workload-name mooncake-w30m-burst"
	"mooncake-synthetic|-workload mooncake -mooncake $SYNTH -mooncake-start 0s -mooncake-duration 0 -mooncake-spread 0 -workload-name mooncake-synthetic"
)

if [[ ${SMOKE:-0} == 1 ]]; then
	GEN_WORKLOADS=(
		"shared|-workload shared-prefix -requests 40 -qps 20"
		"chat|-workload chat -requests 2 -qps 4"
	)
	GEN_TS=0.25
	MC_TS=0.1
	HELDOUT_WORKLOADS=("rag|-workload rag -requests 4 -qps 10")
	TUNING_SEEDS=(1)
	SCORING_SEEDS=(21)
	TUNING_TRACES=("mooncake|-workload mooncake -mooncake $CONV -mooncake-start 0s -mooncake-duration 15s -mooncake-spread 3s")
	SCORING_TRACES=(
		"mooncake-w30m|-workload mooncake -mooncake $CONV -mooncake-start 30m -mooncake-duration 15s -mooncake-spread 3s -workload-name mooncake-w30m"
		"mooncake-w30m-burst|-workload mooncake -mooncake $CONV -mooncake-start 30m -mooncake-duration 15s -mooncake-spread 0 -workload-name mooncake-w30m-burst"
		"mooncake-synthetic|-workload mooncake -mooncake $SYNTH -mooncake-start 0s -mooncake-duration 15s -mooncake-spread 0 -workload-name mooncake-synthetic"
	)
	MC_RUNS=1
	ENGINES=4
	POLICIES=prefix_cache,peer_sglang,peer_dynamo
fi

# The tuning procedure's knobs, each router's own as its upstream
# exposes them (bench/peers/*.go): router|knob (the JSON key)|default|
# values beside the default|bounds lo,hi of an extended range. A knob
# with no bounds is categorical: its values are names (JSON strings),
# and its range is never extended. Every router has the same budget: 8
# variant settings, and at most MAX_EXTEND more where a pick is at the
# edge of its range.
PROCEDURE_KNOBS=(
	# prefix_cache as Caddyfile.example configures it (PC_FIELDS): the
	# choice (the default cost against the rules), the cost's one
	# trade-off knob, then the bounds and the queue's speed.
	"prefix_cache|choice|cost|rules|"
	"prefix_cache|cache_weight|2|1 8|0,64"
	"prefix_cache|load_factor|1.25|1.5|1,8"
	"prefix_cache|min_match_ratio|0.3|0.5|0,1"
	"prefix_cache|load_allowance_bytes|131072|262144|0,16777216"
	"prefix_cache|prefill_rate|65536|32768 131072|1024,16777216"
	# SGLang model gateway: cache-aware policy thresholds.
	"peer_sglang|cache_threshold|0.3|0.1 0.5 0.7|0,1"
	"peer_sglang|balance_abs_threshold|64|16 32 128|1,4096"
	"peer_sglang|balance_rel_threshold|1.5|1.25 2|1.01,16"
	# llm-d inference scheduler: the scorers' weights.
	"peer_llmd|prefix_weight|3|1 2 5 8|0,64"
	"peer_llmd|queue_weight|2|1 4|0,64"
	"peer_llmd|kv_cache_weight|2|1 4|0,64"
	# KubeAI: CHWBL's load bound and the prefix hashed.
	"peer_kubeai|mean_load_factor|1.25|1.1 1.5 2 3|1.01,16"
	"peer_kubeai|prefix_char_length|100|50 200 400 800|1,65536"
	# vLLM production-stack: the prefix trie's chunk and match threshold.
	"peer_vllmstack|chunk_size|128|32 64 256 512|8,8192"
	"peer_vllmstack|match_threshold|0|128 512 2048 8192|0,1048576"
	# Dynamo's KV router, with KV events (the reference) and without.
	"peer_dynamo|prefill_load_scale|1|0.5 2 4 8|0.0625,64"
	"peer_dynamo|overlap_score_credit|1|0.5 1.5 2 3|0,16"
	"peer_dynamo_approx|prefill_load_scale|1|0.5 2 4 8|0.0625,64"
	"peer_dynamo_approx|overlap_score_credit|1|0.5 1.5 2 3|0,16"
)
MAX_EXTEND=4
if [[ ${SMOKE:-0} == 1 ]]; then
	PROCEDURE_KNOBS=(
		"prefix_cache|choice|cost|rules|"
		"prefix_cache|cache_weight|2|8|0,64"
		"peer_sglang|cache_threshold|0.3|0.5|0,1"
	)
	MAX_EXTEND=1
fi
# The frontier (bench/race/run.sh): prefix_cache's trade-off knob, as
# the procedure sweeps it, beside every peer setting it sweeps.
FRONTIER_KNOB=cache_weight
# prefix_cache's default setting as Caddyfile.example configures it, the
# fields a variant starts from.
PC_FIELDS=('"policy":"prefix_cache"' '"load_factor":1.25' '"load_allowance":16' '"min_match":1024' '"prefill_rate":65536' '"fallback":{"policy":"least_conn"}')

# spec_json ROUTER KEY=VALUE...: the router's default selection JSON
# with those keys set.
spec_json() {
	local router=$1 kv f
	shift
	local fields=("\"policy\":\"$router\"")
	[[ $router != prefix_cache ]] || fields=("${PC_FIELDS[@]}")
	for kv in "$@"; do
		local keep=()
		for f in "${fields[@]}"; do
			[[ $f == "\"${kv%%=*}\":"* ]] || keep+=("$f")
		done
		fields=("${keep[@]}" "\"${kv%%=*}\":${kv#*=}")
	done
	local IFS=,
	echo "{${fields[*]}}"
}

# knob_json BOUNDS VALUE: VALUE as JSON for a knob with those bounds:
# a number as it is, a categorical knob's (no bounds) name quoted.
knob_json() {
	if [[ -z $1 ]]; then
		echo "\"$2\""
	else
		echo "$2"
	fi
}

# A run's tree is its code: the commit it started from, and a "dirty:"
# line per uncommitted change to its code. bench/results holds only the
# files runs write, and no run builds a _test.go file into what it
# measures: neither is code here. A run too long for one sitting commits
# the cells it has so far under bench/results and resumes, on another
# machine, from the commit that holds them: code_tree names the tree,
# same_code checks a resume against it.
RESULTS_DIR=bench/results
NOT_CODE=(":(exclude)$RESULTS_DIR" ":(exclude,glob)**/*_test.go")
code_tree() {
	git rev-parse HEAD
	git status --porcelain --untracked-files=no -- . "${NOT_CODE[@]}" | sed 's/^/dirty: /'
}

# same_code DIR succeeds when the working tree may resume DIR's run: no
# uncommitted change outside results and test files, and the code at
# HEAD the code of the commit DIR/commit.txt names, so that every file
# of the run comes from one build. A run started from a dirty tree never
# resumes.
same_code() {
	local start
	start=$(head -1 "$1/commit.txt")
	if grep -q '^dirty: ' "$1/commit.txt" || code_tree | grep -q '^dirty: '; then
		echo "$1 was started from $start; resume it from a clean tree with that commit's code, or use a new directory" >&2
		return 1
	fi
	if ! git cat-file -e "$start^{commit}" 2>/dev/null ||
		! git diff --quiet "$start" HEAD -- . "${NOT_CODE[@]}"; then
		echo "$1 was started from $start, whose code differs from HEAD's outside $RESULTS_DIR and test files; resume it from that commit, or use a new directory" >&2
		return 1
	fi
}

# start_or_resume DIR records the tree a run starts from (code_tree) in
# DIR/commit.txt; a directory that already has commit.txt is a run being
# resumed, and same_code must accept it.
start_or_resume() {
	mkdir -p "$1"
	if [[ -f $1/commit.txt ]]; then
		same_code "$1" || exit 1
		echo "resuming $1: cells that have their JSON are kept" >&2
	else
		code_tree >"$1/commit.txt"
	fi
}

# build starts or resumes the run in $1 and puts prefixbench and
# peertable, built from the working tree, in $1/.bin.
build() {
	start_or_resume "$1"
	mkdir -p "$1/.bin"
	go build -o "$1/.bin/prefixbench" ./bench/cmd/prefixbench
	go build -o "$1/.bin/peertable" ./bench/cmd/peertable
}

# done_cell reports whether the cell writing $1 has already been run: the
# JSON is written only when a prefixbench run has finished.
done_cell() {
	if [[ -s $1 ]]; then
		echo "kept $1" >&2
		return 0
	fi
	return 1
}

# runlog runs a command after appending it to $OUT/commands.txt.
runlog() {
	printf '%q ' "$@" >>"$OUT/commands.txt"
	echo >>"$OUT/commands.txt"
	"$@"
}
