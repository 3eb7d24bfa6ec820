#!/usr/bin/env bash
# Builds everything in release (the only profile: RocksDB is built once) and runs every test of the workspace,
# the multi-process integration tests included. The test runner's summary is the last thing printed.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
# The integration tests start these binaries; they find them here.
export WEIR_BIN_DIR="$CARGO_TARGET_DIR/release"
# Errors of the tests carry their own context; keep anyhow from appending a backtrace to each.
export RUST_LIB_BACKTRACE="${RUST_LIB_BACKTRACE:-0}"
# setup.sh has installed every tool the tests use: a test that would skip outside this script for want of one
# (podman or kubectl in tests/containers.rs) fails here instead.
export WEIR_REQUIRE_TOOLS=1

cargo build --release --workspace --bins

# setup.sh installs nextest; .config/nextest.toml runs the cluster tests one at a time, with a timeout. Under
# plain `cargo test` they are one at a time too (each cluster holds a lock file next to the binaries), only
# without the timeout.
if cargo nextest --version >/dev/null 2>&1; then
  exec cargo nextest run --release --workspace --no-fail-fast
else
  echo "test.sh: cargo-nextest not found; running cargo test (no per-test timeout)" >&2
  exec cargo test --release --workspace --no-fail-fast
fi
