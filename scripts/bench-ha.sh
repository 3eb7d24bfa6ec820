#!/usr/bin/env bash
# HA and security benchmarks: `failover` (SIGKILL of the leader -> job running again, over --kills kills) and
# `tls` (the keyed count across two task managers, plaintext against TLS, in alternating pairs). Arguments go
# to weir-ha-bench (see --help), e.g. `scripts/bench-ha.sh failover --kills 10`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
export WEIR_BIN_DIR="${WEIR_BIN_DIR:-$CARGO_TARGET_DIR/release}"
cargo build --release --workspace --bins
exec "$CARGO_TARGET_DIR/release/weir-ha-bench" "$@"
