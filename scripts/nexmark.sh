#!/usr/bin/env bash
# Nexmark on Weir: runs the queries of bench/nexmark/ on a local cluster (RocksDB, incremental checkpoints every
# 10 s, a blackhole sink) and prints events/s, CPU seconds, events per CPU-second, peak memory, rows out and
# checkpoints, one JSON line per run. Arguments go to weir-nexmark (see --help), e.g.
#   scripts/nexmark.sh q5 --events 50M -p 2
#   scripts/nexmark.sh all --events 10M --runs 3
#   scripts/nexmark.sh q1 --sql              (the Flink SQL text of bench/nexmark/sql/ instead of the YAML spec)
#   scripts/nexmark.sh all --events 200k --tps 2000 --csv /tmp/nx     (results, checked against Flink's; q6 against the generator's reference)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --build-only
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
cargo build --release --workspace --bins
exec "$CARGO_TARGET_DIR/release/weir-nexmark" "$@"
