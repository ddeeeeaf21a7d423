#!/usr/bin/env bash
# Builds oncehook and its benchmark (the `oncehook-bench` workspace crate) in release mode
# and runs the benchmark (both databases by default). Each step starts `oncehook serve` as
# a child process; any arguments go to `oncehook-bench`, e.g.:
#   scripts/bench/run.sh --quick
#   scripts/bench/run.sh --database postgres --duration-secs 10
#   scripts/bench/run.sh --database postgres --steps capacity
#   scripts/bench/run.sh --database postgres --steps soak --soak-secs 1800 --autovacuum off
#   ONCEHOOK_PROCESSOR__WORKERS=2 scripts/bench/run.sh --database postgres --steps processing
# The report (Markdown) goes to stdout, progress to stderr. The servers log at warn: at
# info they write a line per event, which is measured too when you ask for it (RUST_LOG).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet -p oncehook -p oncehook-bench --bins
exec ./target/release/oncehook-bench --oncehook-bin ./target/release/oncehook "$@"
