-- The outbox's idempotency keys and the ledger's effect keys are SHA-256 digests: unique on
-- their own, every row went to a random leaf of a B-tree that outgrows memory, a page dirtied
-- per row (two outbox rows per event), written to the log and again at the next checkpoint.
-- Both keys are digests over parts that include the order id (domain::effect_key,
-- commands::refund_key), so a key never comes with two orders: unique per order is the same
-- rule, and its index is ordered by order first, so the rows of one order, and the orders
-- a merchant numbers in sequence, share leaves. No query looks a row up by its key alone.
ALTER TABLE outbox DROP CONSTRAINT outbox_idempotency_key_key;
ALTER TABLE outbox ADD CONSTRAINT outbox_order_idempotency_key UNIQUE (order_id, idempotency_key);
ALTER TABLE order_ledger DROP CONSTRAINT order_ledger_effect_key_key;
ALTER TABLE order_ledger ADD CONSTRAINT order_ledger_order_effect_key UNIQUE (order_id, effect_key);
