-- Set-based processing ceiling on PostgreSQL: the same work as pg_process.sql (a payment
-- that applies: effect key, new order, its fact, ledger entry, two outbox messages, payment
-- reference, inbox row filed), but for a batch of :batch events per transaction and one
-- statement per table for the whole batch, through a temporary table of the batch's events.
-- This is what src/store/batch.rs does (it adds the order lock and the reads of existing
-- facts and ledgers, which a batch of new orders skips). Events/s = tps x :batch.
--
-- Setup as for pg_process.sql (claimed inbox rows with ids 1..N and the sequence
-- bench_inbox_ids; scripts/bench/ceiling_setup.sh does it for a database of its own), then:
--   pgbench -n -M extended -f scripts/bench/pg_process_batch.sql -c 4 -j 2 -T 5 -D batch=32 \
--     -D payload='{"type":"order.paid",...}' postgres://postgres@127.0.0.1/DB
CREATE TEMP TABLE IF NOT EXISTS batch_events (inbox_id bigint, r bigint, now_ms bigint)
    ON COMMIT DELETE ROWS;
BEGIN;
INSERT INTO batch_events
SELECT nextval('bench_inbox_ids'), (random() * 4611686018427387903)::bigint,
    (extract(epoch FROM clock_timestamp()) * 1000)::bigint
FROM generate_series(1, :batch);
-- Without statistics the planner takes the temporary table for thousands of rows and
-- joins the inbox by a sequential scan (~100 ms a batch); the processor's VALUES lists
-- carry their row count, so it never has this problem.
ANALYZE batch_events;
INSERT INTO processed_effects (effect_key, transition, order_id, external_ref, provider,
    event_id, outcome, applied_at)
SELECT encode(sha256(convert_to('pay|ord_' || r || '|pi_' || r, 'UTF8')), 'hex'), 'pay',
    'ord_' || r, 'pi_' || r, 'stripe', 'evt_' || inbox_id, 'applied', now_ms
FROM batch_events ORDER BY 1
ON CONFLICT (effect_key) DO NOTHING;
INSERT INTO orders (order_id, status, currency, amount_paid, amount_refunded, amount_disputed,
    attention, last_event_at, last_event_id, created_at, updated_at)
SELECT 'ord_' || r, 'paid', 'EUR', 4200, 0, 0, NULL, 1718900000000, 'evt_' || inbox_id,
    now_ms, now_ms
FROM batch_events ORDER BY 1
ON CONFLICT (order_id) DO UPDATE SET status = excluded.status,
    amount_paid = excluded.amount_paid, last_event_at = excluded.last_event_at,
    last_event_id = excluded.last_event_id, updated_at = excluded.updated_at;
INSERT INTO order_facts (kind, resource_id, parent_ref, state, at_ms, sequence, rank, amount,
    money_seen, canceled_at, class, order_id, provider, event_id, created_at, updated_at)
SELECT 'payment', 'pi_' || r, NULL, 'pay', 1718900000000, NULL, 4, 4200, 1, NULL, 1,
    'ord_' || r, 'stripe', 'evt_' || inbox_id, now_ms, now_ms
FROM batch_events
ON CONFLICT (order_id, kind, resource_id) DO NOTHING;
INSERT INTO order_ledger (order_id, transition, status_after, amount, currency, external_ref,
    effect_key, provider, event_id, occurred_at, recorded_at, entry, group_ref, counted)
SELECT 'ord_' || r, 'pay', 'paid', 4200, 'EUR', 'pi_' || r,
    encode(sha256(convert_to('ledger|payment|ord_' || r || '|pi_' || r, 'UTF8')), 'hex'),
    'stripe', 'evt_' || inbox_id, 1718900000000, now_ms, 'payment', NULL, 4200
FROM batch_events;
INSERT INTO outbox (idempotency_key, effect_key, order_id, topic, sink, payload,
    correlation_id, status, next_attempt_at, created_at)
SELECT encode(sha256(convert_to(inbox_id || '|log|' || t.topic, 'UTF8')), 'hex'),
    encode(sha256(convert_to('pay|ord_' || r || '|pi_' || r, 'UTF8')), 'hex'),
    'ord_' || r, t.topic, 'log', :payload, 'corr_' || r, 'pending', now_ms, now_ms
FROM batch_events CROSS JOIN (VALUES ('payment.recorded'), ('order.paid')) AS t (topic);
INSERT INTO payment_refs (provider, reference, order_id)
SELECT 'stripe', 'pi_' || r, 'ord_' || r FROM batch_events ORDER BY 2
ON CONFLICT (provider, reference) DO NOTHING;
UPDATE inbox_events SET status = 'applied', reason = NULL, order_id = 'ord_' || b.r,
    effect_key = encode(sha256(convert_to('pay|ord_' || b.r || '|pi_' || b.r, 'UTF8')), 'hex'),
    processed_at = b.now_ms
FROM batch_events AS b
WHERE inbox_events.id = b.inbox_id AND inbox_events.attempts = 1
    AND inbox_events.status = 'processing';
COMMIT;
