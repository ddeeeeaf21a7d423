#!/usr/bin/env bash
# Every test oncehook has: formatting and lints, the book's build and links (docs/), unit
# and integration tests on SQLite and (when ONCEHOOK_TEST_POSTGRES_URL is set) PostgreSQL,
# the API's contract test
# (schemathesis against the real binary, scripts/api-contract.sh), then the browser tests
# against the real binary with the hydrated dashboard. Installs what is missing on the way.
#
#   scripts/test.sh
#   ONCEHOOK_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
started=$SECONDS
step() { echo; echo "== $1 ($((SECONDS - started))s)"; }

if [ -n "${ONCEHOOK_TEST_POSTGRES_URL:-}" ]; then
  echo "PostgreSQL tests: on ($ONCEHOOK_TEST_POSTGRES_URL)"
else
  echo "PostgreSQL tests: off (set ONCEHOOK_TEST_POSTGRES_URL to run them)"
fi

# A clean CI checkout builds once: incremental state would only take disk (4 GB) and time.
if [ "${CI:-}" = "true" ]; then
  export CARGO_INCREMENTAL=0
fi

step "rustfmt and clippy"
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed | grep -q '^clippy' || rustup component add clippy
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

# The book (docs/, an mdBook): a broken relative link or anchor fails the build, through
# mdbook-linkcheck (0.7.7 is built against mdbook 0.4; mdbook 0.5 changed the renderer's
# input and needs a fork). Web links are not followed. README.md's and ARCHITECTURE.md's
# links into docs/ are checked by tests/reference_docs.rs, with the generated reference pages.
step "the book (mdbook build docs, links checked)"
mdbook_version=0.4.52
linkcheck_version=0.7.7
if ! mdbook --version 2>/dev/null | grep -qx "mdbook v$mdbook_version"; then
  cargo install mdbook --version "$mdbook_version" --locked --no-default-features --features search
fi
if ! mdbook-linkcheck --version 2>/dev/null | grep -qx "mdbook-linkcheck $linkcheck_version"; then
  cargo install mdbook-linkcheck --version "$linkcheck_version" --locked
fi
mdbook build docs

step "unit, integration and property tests (SQLite${ONCEHOOK_TEST_POSTGRES_URL:+ and PostgreSQL})"
cargo test --workspace

step "dashboard frontend (wasm) and server binary"
scripts/build-frontend.sh
cargo build --bin oncehook

step "API contract (schemathesis against the binary, SQLite${ONCEHOOK_TEST_POSTGRES_URL:+ and PostgreSQL})"
scripts/api-contract.sh

step "browser tests (Playwright, Debian chromium)"
end2end/run.sh

step "all tests passed"
