-- Processing ceiling on PostgreSQL: the statements of oncehook's processing transaction
-- (src/store/effects.rs) for a payment that applies, one event per transaction, one
-- statement per round trip like the processor, without the Rust around it and without the
-- claim (the processor claims inbox rows in batches before it):
--   INSERT processed_effects (the effect key, first) → INSERT orders with its final state
--   (a new order) → INSERT order_facts (its one fact) → INSERT order_ledger → INSERT outbox
--   twice (payment.recorded, order.paid) → INSERT payment_refs → UPDATE inbox_events (file
--   the event, fenced on the claim).
--
-- It needs inbox rows to file: `oncehook-bench` fills inbox_events with claimed rows
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
INSERT INTO orders (order_id, status, currency, amount_paid, amount_refunded, amount_disputed,
    attention, last_event_at, last_event_id, created_at, updated_at)
VALUES ('ord_' || CAST(:r AS text), 'paid', 'EUR', 4200, 0, 0, CAST(NULL AS text), :occurred,
    'evt_' || CAST(:inbox_id AS text), :now_ms, :now_ms)
ON CONFLICT (order_id) DO NOTHING;
INSERT INTO order_facts (kind, resource_id, parent_ref, state, at_ms, sequence, rank, amount,
    money_seen, canceled_at, class, order_id, provider, event_id, created_at, updated_at)
VALUES ('payment', 'pi_' || CAST(:r AS text), CAST(NULL AS text), 'pay', :occurred,
    CAST(NULL AS bigint), 4, 4200, 1, CAST(NULL AS bigint), 1, 'ord_' || CAST(:r AS text),
    'stripe', 'evt_' || CAST(:inbox_id AS text), :now_ms, :now_ms)
ON CONFLICT (order_id, kind, resource_id) DO NOTHING;
INSERT INTO order_ledger (order_id, transition, status_after, amount, currency, external_ref,
    effect_key, provider, event_id, occurred_at, recorded_at, entry, group_ref, counted)
VALUES ('ord_' || CAST(:r AS text), 'pay', 'paid', 4200, 'EUR', 'pi_' || CAST(:r AS text),
    :effect_key, 'stripe', 'evt_' || CAST(:inbox_id AS text), :occurred, :now_ms, 'payment',
    CAST(NULL AS text), 4200);
INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload,
    correlation_id, status, next_attempt_at, created_at)
VALUES (encode(sha256(convert_to(:effect_key || '|log|payment.recorded', 'UTF8')), 'hex'), :effect_key,
    'ord_' || CAST(:r AS text), 'payment.recorded', 'log', :payload, 'corr_' || CAST(:r AS text),
    'pending', :now_ms, :now_ms);
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
