#!/bin/sh
# Runs both processing ceilings (one event per transaction: pg_process.sql; set-based
# batches: pg_process_batch.sql) on a database of their own with oncehook's schema, as
# `oncehook-bench --steps ceilings` prepares it: claimed inbox rows with ~2.6 KB bodies.
#   scripts/bench/ceiling_setup.sh [ADMIN_URL] [SECONDS]
# Prints tx/s and events/s per script and batch size; drops its database at the end.
set -eu
admin=${1:-postgres://postgres@127.0.0.1:5432/postgres}
secs=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
db=oncehook_ceiling_$$
base=${admin%/*}
url="$base/$db"
payload='{"type":"order.paid","order_id":"ord_0123456789_12345","status":"paid","transition":"pay","amount":4200,"currency":"EUR","external_ref":"pi_3P0123456789000012345","provider":"stripe","event_id":"evt_3P0123456789000012345","event_type":"payment_intent.succeeded","occurred_at_ms":1718900000000}'
body=$(head -c 1950 /dev/zero | tr '\0' 'x')
prepare() {
    psql -q "$admin" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
    for f in "$root"/migrations/postgres/*.sql; do psql -q -v ON_ERROR_STOP=1 "$url" -f "$f"; done
    psql -q -v ON_ERROR_STOP=1 "$url" <<SQL
CREATE SEQUENCE bench_inbox_ids;
INSERT INTO inbox_events (provider, event_id, event_type, api_version, raw_body,
    correlation_id, received_at, status, attempts, next_attempt_at)
SELECT 'stripe', 'evt_' || g, 'payment_intent.succeeded', '2024-06-20',
    convert_to('{"id":"evt_' || g || '","pad":"$body"}', 'UTF8'), 'corr_' || g, 0,
    'processing', 1, 9000000000000 FROM generate_series(1, 100000) AS g;
ANALYZE;
SQL
}
run() { # script, batch
    prepare
    mode=extended; [ "$1" = pg_process.sql ] && mode=prepared
    tps=$(pgbench -n -M "$mode" -f "$here/$1" -c 4 -j 2 -T "$secs" -D batch="$2" -D payload="$payload" \
        "$url" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    echo "$1 batch=$2: $tps tx/s = $(echo "$tps * $2" | bc) events/s"
}
run pg_process.sql 1
run pg_process_batch.sql 32
run pg_process_batch.sql 128
psql -q "$admin" -c "DROP DATABASE IF EXISTS $db"
