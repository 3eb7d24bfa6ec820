#!/usr/bin/env bash
# The chaos run, for as long as you like: one `emit: updates` job (datagen -> keyed-count -> file-sink, on S3
# through a proxy) driven through a random but seeded schedule of faults — task managers SIGKILLed and
# replaced, the job manager SIGKILLed and restarted, the object store unreachable, failpoint errors and delays
# on RPCs, store calls, job-store writes, uploads and commits — and then checked: the committed output is
# exact and no shared file is orphaned. The suite runs the same test with one minute of faults.
#
#   scripts/chaos.sh [--minutes N] [--seed S]     (default: 20 minutes, a fresh seed, printed)
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=20
seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "chaos.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$minutes" in ''|*[!0-9]*) echo "chaos.sh: --minutes takes a whole number" >&2; exit 2 ;; esac
if [ -z "$seed" ]; then seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' '); fi

scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
export WEIR_BIN_DIR="$CARGO_TARGET_DIR/release"
export RUST_LIB_BACKTRACE="${RUST_LIB_BACKTRACE:-0}"
export WEIR_CHAOS_SECONDS=$((minutes * 60))
export WEIR_TEST_SEED="$seed"
echo "chaos: $minutes minutes of faults, seed $seed (rerun: scripts/chaos.sh --minutes $minutes --seed $seed)" >&2
cargo build --release --workspace --bins
exec cargo test --release -p weir-integration-tests --test chaos -- --nocapture --test-threads 1
