#!/usr/bin/env bash
# The demo: a local cluster counts 4 million records, loses a task manager halfway, recovers and verifies
# its output exactly-once. Arguments go to weir-demo (e.g. --keep DIR to keep logs, checkpoints and output).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --build-only
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
# Only what the demo runs, and the CLI a user reaches for next: the example task managers and the benchmark
# drivers are `scripts/test.sh`'s to build (the same features either way, so nothing is compiled twice).
cargo build --release --bin weir-jobmanager --bin weir-taskmanager --bin weir-demo --bin weir
exec "$CARGO_TARGET_DIR/release/weir-demo" "$@"
