-- Processing ceiling on PostgreSQL: the statements of oncehook's processing transaction
-- (src/store/effects.rs) for a payment that applies, one event per transaction, one
-- statement per round trip like the processor, without the Rust around it and without the
-- claim (the processor claims inbox rows in batches before it):
--   INSERT processed_effects (the effect key, first) → INSERT orders ON CONFLICT (upsert)
--   → guarded UPDATE orders → INSERT order_ledger → INSERT outbox → INSERT payment_refs
--   → UPDATE inbox_events (file the event, fenced on the claim).
--
-- It needs inbox rows to file: `oncehook bench` fills inbox_events with claimed rows
-- (status 'processing', attempts 1, ids 1..N, the same ~2.6 KB body) and creates the
-- sequence bench_inbox_ids, then runs:
--   pgbench -n -M prepared -f scripts/bench/pg_process.sql -c 4 -j 2 -T 5 \
--     -D payload='{"type":"order.paid",...}' postgres://postgres@127.0.0.1/DB
\set r random(1, 4611686018427387903)
\set occurred 1718900000000
BEGIN;
SELECT nextval('bench_inbox_ids') AS inbox_id,
    (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms \gset
INSERT INTO processed_effects (effect_key, transition, order_id, external_ref, provider,
    event_id, outcome, applied_at)
VALUES (encode(sha256(convert_to('pay|ord_' || CAST(:r AS text) || '|pi_' || CAST(:r AS text), 'UTF8')), 'hex'),
    'pay', 'ord_' || CAST(:r AS text), 'pi_' || CAST(:r AS text), 'stripe',
    'evt_' || CAST(:inbox_id AS text), 'applied', :now_ms)
ON CONFLICT (effect_key) DO NOTHING RETURNING effect_key \gset
INSERT INTO orders (order_id, status, currency, created_at, updated_at)
VALUES ('ord_' || CAST(:r AS text), 'pending', 'EUR', :now_ms, :now_ms)
ON CONFLICT (order_id) DO NOTHING;
UPDATE orders SET status = 'paid', last_event_at = :occurred, last_sequence = CAST(NULL AS bigint),
    last_rank = 4, last_event_id = 'evt_' || CAST(:inbox_id AS text),
    currency = COALESCE('EUR', currency), updated_at = :now_ms
WHERE order_id = 'ord_' || CAST(:r AS text)
    AND status IN ('pending', 'authorized', 'paid', 'settled', 'refunded', 'disputed', 'failed', 'canceled')
    AND (last_event_at IS NULL OR last_event_at < :occurred OR (last_event_at = :occurred AND (
        (last_sequence IS NOT NULL AND CAST(NULL AS bigint) IS NOT NULL AND last_sequence <> CAST(NULL AS bigint)
            AND last_sequence < CAST(NULL AS bigint))
        OR ((last_sequence IS NULL OR CAST(NULL AS bigint) IS NULL OR last_sequence = CAST(NULL AS bigint))
            AND last_rank < 4))));
INSERT INTO order_ledger (order_id, transition, status_after, amount, currency, external_ref,
    effect_key, provider, event_id, occurred_at, recorded_at)
VALUES ('ord_' || CAST(:r AS text), 'pay', 'paid', 4200, 'EUR', 'pi_' || CAST(:r AS text),
    :effect_key, 'stripe', 'evt_' || CAST(:inbox_id AS text), :occurred, :now_ms);
INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload,
    correlation_id, status, next_attempt_at, created_at)
VALUES (encode(sha256(convert_to(:effect_key || '|log|order.paid', 'UTF8')), 'hex'), :effect_key,
    'ord_' || CAST(:r AS text), 'order.paid', 'log', :payload, 'corr_' || CAST(:r AS text),
    'pending', :now_ms, :now_ms);
INSERT INTO payment_refs (provider, reference, order_id)
VALUES ('stripe', 'pi_' || CAST(:r AS text), 'ord_' || CAST(:r AS text))
ON CONFLICT (provider, reference) DO NOTHING;
UPDATE inbox_events SET status = 'applied', reason = CAST(NULL AS text),
    order_id = 'ord_' || CAST(:r AS text), effect_key = :effect_key, processed_at = :now_ms
WHERE id = :inbox_id AND attempts = 1 AND status = 'processing';
COMMIT;
