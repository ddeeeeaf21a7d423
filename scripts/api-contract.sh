#!/usr/bin/env bash
# The API's contract test: `/api/v1/openapi.json` against the real binary, the way a client
# generated from it calls the API. Starts `oncehook serve` on a fresh SQLite database (and,
# when ONCEHOOK_TEST_POSTGRES_URL is set, again on a fresh PostgreSQL database created for
# the run and dropped after it), seeds orders, events and dead letters through signed
# webhooks, makes an admin token, and runs schemathesis with every check and the examples,
# coverage, fuzzing and stateful phases. Any failure fails the script.
#
#   scripts/api-contract.sh
#   ONCEHOOK_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres scripts/api-contract.sh
#
# Env: ONCEHOOK_BIN (default target/debug/oncehook, built when missing),
#      API_CONTRACT_MAX_EXAMPLES (test cases per operation and phase, default 50),
#      API_CONTRACT_SEED (default 20261202: the same seed generates the same requests),
#      API_CONTRACT_KEEP=1 keeps each run's directory (server log, JUnit report).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
bin=${ONCEHOOK_BIN:-$root/target/debug/oncehook}
max_examples=${API_CONTRACT_MAX_EXAMPLES:-50}
seed=${API_CONTRACT_SEED:-20261202}
# The version these bounds and flags were measured with.
st_version=4.32.5
secret=whsec_api_contract_0123456789abcdef
started=$SECONDS

if [ ! -x "$bin" ]; then
  cargo build --bin oncehook
fi

# schemathesis 4 on PATH, else the pinned version in a virtualenv under target/ (a system
# Python may refuse `pip install` outside one).
if command -v schemathesis >/dev/null && schemathesis --version 2>/dev/null | grep -q 'version 4\.'; then
  st=(schemathesis)
else
  venv=$root/target/schemathesis-$st_version
  if [ ! -x "$venv/bin/schemathesis" ]; then
    echo "installing schemathesis $st_version into $venv"
    if python3 -m venv "$venv" 2>/dev/null; then
      "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$st_version"
    else
      rm -rf "$venv"
      python3 -m pip install --quiet --disable-pip-version-check "schemathesis==$st_version" \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages \
          "schemathesis==$st_version"
      venv=""
    fi
  fi
  if [ -n "${venv:-}" ]; then st=("$venv/bin/schemathesis"); else st=(schemathesis); fi
fi
echo "$("${st[@]}" --version)"

# Whatever a run leaves behind goes when the script ends, failed or not.
server=""
pg_drop=""
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  if [ -n "$pg_drop" ]; then
    psql "$pg_drop_url" -qc "DROP DATABASE IF EXISTS $pg_drop WITH (FORCE)" >/dev/null || true
  fi
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A Stripe event, signed, to the server's webhook; fails unless it is accepted.
post_event() {
  local body=$1 t sig
  t=$(date +%s)
  sig=$(printf '%s' "$t.$body" | openssl dgst -sha256 -hmac "$secret" | sed 's/^.* //')
  curl -sf -o /dev/null "$base/webhooks/stripe" -H "Stripe-Signature: t=$t,v1=$sig" \
    -H 'Content-Type: application/json' --data-binary "$body"
}

payment() { # event id, payment intent, order, amount
  printf '{"id":"%s","object":"event","api_version":"2024-06-20","created":%s,"type":"payment_intent.succeeded","data":{"object":{"id":"%s","object":"payment_intent","amount":%s,"amount_received":%s,"currency":"eur","status":"succeeded","latest_charge":"ch_%s","metadata":{"order_id":"%s"}}}}' \
    "$1" "$(date +%s)" "$2" "$4" "$4" "$2" "$3"
}

refund() { # event id, payment intent, refund id, amount
  printf '{"id":"%s","object":"event","api_version":"2024-06-20","created":%s,"type":"refund.created","data":{"object":{"id":"%s","object":"refund","amount":%s,"currency":"eur","charge":"ch_%s","payment_intent":"%s","status":"succeeded","metadata":{}}}}' \
    "$1" "$(date +%s)" "$3" "$4" "$2" "$2"
}

# One run against `$1` (a label) on database URL `$2` (`sqlite`: a file in the run's directory).
contract() {
  local label=$1 url=$2 dir port token status=0
  dir=$(mktemp -d "${TMPDIR:-/tmp}/oncehook-api-contract-$label.XXXXXX")
  [ "$url" = sqlite ] && url="sqlite://$dir/oncehook.db"
  cat >"$dir/oncehook.toml" <<EOF
data_dir = "$dir"
site_root = "$dir/no-site"
[[providers]]
name = "stripe"
scheme = "stripe"
secrets = ["$secret"]
tolerance_secs = 300
# An event whose order is unknown is a dead letter at once (production retries for hours).
[processor.retry]
max_attempts = 1
EOF
  "$bin" --config "$dir/oncehook.toml" --database-url "$url" migrate >/dev/null
  token=$("$bin" --config "$dir/oncehook.toml" --database-url "$url" token add api-contract --role admin 2>/dev/null)
  port=$(free_port)
  base=http://127.0.0.1:$port
  RUST_LOG=warn "$bin" serve --config "$dir/oncehook.toml" --database-url "$url" \
    --listen "127.0.0.1:$port" >"$dir/server.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    curl -sf -o /dev/null "$base/healthz" && break
    sleep 0.1
  done
  curl -sf -o /dev/null "$base/healthz" || { cat "$dir/server.log"; return 1; }

  # Orders with payments, one partly refunded; refunds of unknown payments → dead letters.
  for i in 1 2 3; do post_event "$(payment "evt_contract_pay_$i" "pi_contract_$i" "order-contract-$i" 4200)"; done
  post_event "$(refund evt_contract_refund_1 pi_contract_1 re_contract_1 1000)"
  for i in 1 2 3; do post_event "$(refund "evt_contract_orphan_$i" "pi_contract_orphan_$i" "re_contract_orphan_$i" 500)"; done
  for _ in $(seq 100); do
    [ "$(curl -sf -H "Authorization: Bearer $token" "$base/api/v1/dead-letters" | jq .open)" = 3 ] && break
    sleep 0.1
  done

  echo
  echo "== schemathesis against $label ($((SECONDS - started))s)"
  local t0=$SECONDS
  # From the run's directory: schemathesis keeps a cache (.schemathesis/) where it runs.
  (cd "$dir" && SCHEMATHESIS_HOOKS=$root/scripts/api_contract_hooks.py \
    "${st[@]}" --no-color --config-file "$root/scripts/api-contract.toml" run "$base/api/v1/openapi.json" \
    --checks all --phases examples,coverage,fuzzing,stateful \
    --header "Authorization: Bearer $token" \
    --max-examples "$max_examples" --seed "$seed" --generation-database none \
    --workers 1 --request-timeout 10 \
    --report junit,vcr --report-junit-path "$dir/junit.xml" --report-vcr-path "$dir/cassette.yaml") || status=$?
  echo "schemathesis on $label: exit $status in $((SECONDS - t0))s"

  kill "$server"
  wait "$server" || true
  server=""
  if grep -q 'panicked' "$dir/server.log"; then
    echo "the server panicked on $label:" >&2
    grep -A3 panicked "$dir/server.log" >&2
    status=1
  fi
  if [ "$status" != 0 ] || [ -n "${API_CONTRACT_KEEP:-}" ]; then
    echo "kept $dir (server.log, junit.xml)"
  else
    rm -rf "$dir"
  fi
  return "$status"
}

failed=0
contract sqlite sqlite || failed=1

if [ -n "${ONCEHOOK_TEST_POSTGRES_URL:-}" ]; then
  pg_base=$ONCEHOOK_TEST_POSTGRES_URL
  pg_name="oncehook_contract_$(date +%s)_$$"
  psql "$pg_base" -v ON_ERROR_STOP=1 -qc "CREATE DATABASE $pg_name"
  pg_drop=$pg_name
  pg_drop_url=$pg_base
  # The same server, another database: the URL's last path segment replaced (or added).
  case ${pg_base#*://} in
    */*) pg_url="${pg_base%/*}/$pg_name" ;;
    *) pg_url="$pg_base/$pg_name" ;;
  esac
  contract postgres "$pg_url" || failed=1
else
  echo "PostgreSQL: skipped (set ONCEHOOK_TEST_POSTGRES_URL to run the contract there too)"
fi

echo
if [ "$failed" != 0 ]; then
  echo "API contract: FAILED ($((SECONDS - started))s)"
  exit 1
fi
echo "API contract: passed ($((SECONDS - started))s)"
