#!/usr/bin/env bash
# The Kafka benchmark: a Weir job reading a topic (→ blackhole) and reading, counting and writing it back
# exactly once (→ keyed-count → kafka-sink), each against plain librdkafka clients doing the same reads and
# writes, on a Tansu broker; or, with --visibility, the delay exactly-once adds before output is visible.
# Arguments go to weir-kafka-bench (see --help; e.g. --records 5000000 --rounds 5).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
cargo build --release --workspace --bins
exec "$CARGO_TARGET_DIR/release/weir-kafka-bench" "$@"
