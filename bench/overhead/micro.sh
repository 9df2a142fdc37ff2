#!/usr/bin/env bash
# Microbenchmarks of issue 7 (docs/overhead.md): every stage of Select on
# chat bodies of 1 KB to 1 MB, the whole Select through the real module,
# the encoding/json reference, and scaling with upstreams and index
# entries. Results go to $OUT (default /tmp/overhead-micro), one file per
# group; with benchstat on PATH, a median table of each is printed.
#
#	bench/overhead/micro.sh                 # ~15 minutes on 2 shared cores
#	COUNT=3 SCALE= bench/overhead/micro.sh  # quicker, without the 10M-entry index
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/overhead-micro}
COUNT=${COUNT:-6}
export PREFIXCACHE_BENCH_SCALE=${SCALE-1}
mkdir -p "$OUT"

run() { # name package regexp [extra go test flags...]
	local name=$1 pkg=$2 re=$3
	shift 3
	echo "== $name: go test -run '^\$' -bench '$re' -count $COUNT $* $pkg" >&2
	go test -run '^$' -bench "$re" -count "$COUNT" "$@" "$pkg" >"$OUT/$name.txt"
	if command -v benchstat >/dev/null; then benchstat "$OUT/$name.txt"; fi
}

run select    ./caddymodule 'Benchmark(Select|SelectStages|SelectJSON)$' -benchtime 0.3s
run upstreams ./caddymodule 'Benchmark(SelectUpstreams|UpstreamKeys|SelectParallel)$' -benchtime 0.3s
run entries   ./caddymodule 'BenchmarkSelectEntries$' -benchtime 2000x
run dialect   ./dialect 'BenchmarkAppend$' -benchtime 0.3s
run index     ./prefixindex 'Benchmark(Chunker|Depths|Record|Parallel|Memory)$' -benchtime 0.3s
run scale     ./prefixindex 'Benchmark(Entries|EntriesParallel|DepthsCandidates|InternNew)$' -benchtime 0.3s
run choose    ./selection 'Benchmark(Choose|ChooseParts)$' -benchtime 0.3s
go test -count=1 -run 'TestMemoryBound' -v ./prefixindex | grep -E 'B/entry|^(ok|FAIL|---)' | tee "$OUT/memory.txt"
