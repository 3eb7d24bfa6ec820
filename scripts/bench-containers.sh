#!/usr/bin/env bash
# The container benchmark: image size, cold start of the compose cluster, and the keyed count in containers
# against the same on the host, alternating. Arguments go to weir-container-bench (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/containers/containers.conf}"
cargo build --release --workspace --bins
exec "$CARGO_TARGET_DIR/release/weir-container-bench" "$@"
