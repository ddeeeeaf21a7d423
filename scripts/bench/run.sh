#!/usr/bin/env bash
# Builds oncehook in release mode and runs the benchmark (both databases by default).
# Any arguments go to `oncehook bench`, e.g.:
#   scripts/bench/run.sh --quick
#   scripts/bench/run.sh --database postgres --duration-secs 10
#   ONCEHOOK_RECEIVER__WRITERS=2 scripts/bench/run.sh --database postgres --steps ingest
# The report (Markdown) goes to stdout, progress to stderr. Logging defaults to warn: at
# info the server writes a line per event, which is measured too when you ask for it.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
export RUST_LOG="${RUST_LOG:-warn}"
exec ./target/release/oncehook bench "$@"
