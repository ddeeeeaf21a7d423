#!/usr/bin/env bash
# Builds the dashboard's browser half into target/site, which the server serves:
#   target/site/pkg/oncehook.js, oncehook_bg.wasm   hydration bundle (wasm-bindgen --target web)
#   target/site/pkg/oncehook.css                    style/main.css
#   target/site/*                                   public/
#
# Usage: scripts/build-frontend.sh [--release]
# Installs what is missing (the wasm32 target, the wasm-bindgen CLI matching Cargo.lock) and is
# safe to run again. cargo-leptos is not used: it takes a quarter of an hour to install on two
# cores and downloads tools at build time.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# Where `cargo install` puts wasm-bindgen, even when the caller's PATH lacks it.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

profile_dir=debug
profile_args=()
case "${1:-}" in
  --release) profile_dir=wasm-release; profile_args=(--profile wasm-release) ;;
  "") ;;
  *) echo "usage: $0 [--release]" >&2; exit 2 ;;
esac

# One target dir for the server, the wasm and the tests, wherever cargo was told to put it.
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
site="$target_dir/site"
pkg="$site/pkg"

started=$SECONDS
step_started=$SECONDS
step() {
  local now=$SECONDS
  printf '  %-34s %4ss\n' "$1" "$((now - step_started))"
  step_started=$now
}

echo "building the dashboard frontend ($profile_dir) into $site"

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
step "wasm32 target"

# The CLI must be exactly the library's version, or the generated JS and the WASM disagree.
want="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
if [ -z "$want" ]; then
  echo "wasm-bindgen not found in Cargo.lock" >&2
  exit 1
fi
have="$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)"
if [ "$have" != "$want" ]; then
  echo "installing wasm-bindgen-cli $want (found: ${have:-none}); this takes a few minutes"
  # Not --locked: its lock file names a dependency version the registry no longer has.
  cargo install wasm-bindgen-cli --version "$want"
fi
step "wasm-bindgen-cli $want"

cargo build -p app --lib --target wasm32-unknown-unknown \
  --no-default-features --features hydrate "${profile_args[@]}"
step "cargo build (wasm32, $profile_dir)"

mkdir -p "$pkg"
wasm-bindgen --target web --no-typescript \
  --out-dir "$pkg" --out-name oncehook \
  "$target_dir/wasm32-unknown-unknown/$profile_dir/app.wasm"
step "wasm-bindgen"

cp style/main.css "$pkg/oncehook.css"
if [ -d public ] && [ -n "$(ls -A public)" ]; then
  cp -R public/. "$site/"
fi
step "stylesheet and public/"

ls -l "$pkg" | awk 'NR > 1 { printf "  %-34s %9s bytes\n", $9, $5 }'
echo "done in $((SECONDS - started))s"
