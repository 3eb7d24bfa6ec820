#!/usr/bin/env bash
# The benchmark: throughput of a keyed count on RocksDB, checkpoint durations and sizes, peak memory per
# process and cluster start-up time. Arguments go to weir-bench (see --help; e.g. --records 10000000).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
cargo build --release --workspace --bins
exec "$CARGO_TARGET_DIR/release/weir-bench" "$@"
