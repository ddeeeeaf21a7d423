-- Ingest ceiling on PostgreSQL: exactly what the receiver writes for one webhook (the inbox
-- row, a no-op under UNIQUE (provider, event_id) when it is a redelivery, plus the
-- delivery-log row), one event per transaction, in ONE round trip (a data-modifying CTE,
-- committed on its own). This is the fastest way to store events one per transaction;
-- oncehook's receiver is expected to beat it by batching concurrent requests.
--
-- `oncehook-bench` runs it with pgbench against a fresh database with the oncehook schema:
--   pgbench -n -M prepared -f scripts/bench/pg_ingest.sql -c 16 -j 2 -T 5 \
--     -D body="$(cat event.json)" -D body_sha256=<hex> postgres://postgres@127.0.0.1/DB
-- :body is the same ~2.6 KB Stripe event the HTTP benchmark sends (bytea input; it must
-- not contain backslashes), :body_sha256 its hex digest.
\set r random(1, 4611686018427387903)
WITH inbox AS (
    INSERT INTO inbox_events (provider, event_id, event_type, api_version, raw_body,
        correlation_id, received_at, status, next_attempt_at)
    VALUES ('stripe', 'evt_pgb_' || CAST(:client_id AS text) || '_' || CAST(:r AS text),
        'payment_intent.succeeded', '2024-06-20', :body, 'corr_' || CAST(:r AS text),
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'pending',
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING received_at
)
INSERT INTO deliveries (provider, event_id, duplicate, correlation_id, body_sha256, received_at)
SELECT 'stripe', 'evt_pgb_' || CAST(:client_id AS text) || '_' || CAST(:r AS text),
    CASE WHEN EXISTS (SELECT 1 FROM inbox) THEN 0 ELSE 1 END, 'corr_' || CAST(:r AS text),
    :body_sha256, (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
