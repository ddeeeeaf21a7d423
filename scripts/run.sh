#!/usr/bin/env bash
# Builds everything (installing what is missing) and runs oncehook with the hydrated
# dashboard on the embedded SQLite database under ./data/. Extra arguments go to
# `oncehook serve` (e.g. --listen 0.0.0.0:8080, --config oncehook.toml).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/build-frontend.sh --release
cargo build --release --bin oncehook
export ONCEHOOK_SITE_ROOT="${ONCEHOOK_SITE_ROOT:-$PWD/target/site}"
exec target/release/oncehook serve "$@"
