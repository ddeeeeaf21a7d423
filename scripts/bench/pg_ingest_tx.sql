-- The same ingest as pg_ingest.sql, written the naive way: BEGIN, two INSERTs, COMMIT,
-- four round trips per event. Shown beside the one-round-trip form for context; the
-- ceiling the benchmark compares against is the faster of the two.
\set r random(1, 4611686018427387903)
BEGIN;
INSERT INTO inbox_events (provider, event_id, event_type, api_version, raw_body,
    correlation_id, received_at, status, next_attempt_at)
VALUES ('stripe', 'evt_pgt_' || CAST(:client_id AS text) || '_' || CAST(:r AS text),
    'payment_intent.succeeded', '2024-06-20', :body, 'corr_' || CAST(:r AS text),
    (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'pending',
    (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
ON CONFLICT (provider, event_id) DO NOTHING;
INSERT INTO deliveries (provider, event_id, duplicate, correlation_id, body_sha256, received_at)
VALUES ('stripe', 'evt_pgt_' || CAST(:client_id AS text) || '_' || CAST(:r AS text), 0,
    'corr_' || CAST(:r AS text), :body_sha256,
    (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
COMMIT;
