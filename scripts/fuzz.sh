#!/usr/bin/env bash
# Runs every native Go fuzzer of the module for a fixed time each, one
# after another, and stops at the first failure (the failing input is then
# in that package's testdata/fuzz/<Fuzzer>/, where `go test` replays it).
#
#   scripts/fuzz.sh                 # 60 s per fuzzer
#   FUZZTIME=10m scripts/fuzz.sh    # longer
#   FUZZ_PARALLEL=1 scripts/fuzz.sh # one worker (shared machines)
#   FUZZ_MINIMIZE=60s scripts/fuzz.sh  # minimize new inputs longer (Go's default)
#   scripts/fuzz.sh FuzzPeek        # only the fuzzers whose name matches
#
# Without -fuzz, `go test ./...` runs every fuzzer's seed corpus
# (testdata/fuzz/ and the f.Add seeds) as ordinary tests.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-60s}
parallel=${FUZZ_PARALLEL:-$(nproc 2>/dev/null || echo 2)}
# Minimizing each new interesting input may take up to this long, and its
# executions are not counted: Go's default of 60 s can eat a short run.
minimize=${FUZZ_MINIMIZE:-10s}
only=${1:-}

# package fuzzer: what each fuzzer checks is in its doc comment.
fuzzers=(
	"./caddymodule FuzzPeek"                # body peek: any body, length, read size, max_body; exact bytes forwarded
	"./caddymodule FuzzRoutingHashes"       # dialect text + seed + chunker: deterministic, prefix stable, isolated
	"./dialect FuzzAppend"                  # request-body parsers: never panic, prefix stability
	"./prefixindex FuzzChunker"             # chained chunk hashes: the written-out scheme, prefix stable
	"./selection FuzzChoose"                # the choice: bound respected, order independent
	"./bench/engine FuzzTokenizePrefix"     # the simulated engine's tokenizer: prefix stable
)

for entry in "${fuzzers[@]}"; do
	read -r pkg name <<<"$entry"
	if [[ -n "$only" && "$name" != *"$only"* ]]; then
		continue
	fi
	printf '\n== %s %s (%s, %s workers)\n' "$pkg" "$name" "$fuzztime" "$parallel"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" -parallel "$parallel" "$pkg"
done
