-- Money as facts (PostgreSQL). Identity columns never reuse ids, so unlike SQLite no
-- table needs rebuilding.
-- One row per provider resource of an order (a payment intent or charge, a refund, a
-- dispute, or a charge's running refund total): the facts the order's money and status are
-- derived from. `state` and the stamp change only through the guarded UPDATE (class, then
-- newer stamp); `money_seen`, `canceled_at` and a running total's amount only grow.
CREATE TABLE order_facts (
    order_id     TEXT    NOT NULL,
    -- payment | refund | dispute | refund_total
    kind         TEXT    NOT NULL,
    resource_id  TEXT    NOT NULL,
    parent_ref   TEXT,
    state        TEXT    NOT NULL,
    class        BIGINT NOT NULL,
    at_ms        BIGINT NOT NULL,
    sequence     BIGINT,
    rank         BIGINT NOT NULL,
    amount       BIGINT,
    money_seen   BIGINT NOT NULL,
    canceled_at  BIGINT,
    provider     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (order_id, kind, resource_id)
);

-- The ledger holds entries, not transitions: a fact (payment, refund, dispute), a reversal
-- (refund_reversal, dispute_closed) or the unexplained part of a running total
-- (refund_observed). `amount` is the fact's own amount, `counted` what it adds to its total
-- (signed). `effect_key` is the entry's key: sha256(entry, order, resource).
ALTER TABLE order_ledger ADD COLUMN entry TEXT NOT NULL DEFAULT 'payment';
ALTER TABLE order_ledger ADD COLUMN group_ref TEXT;
ALTER TABLE order_ledger ADD COLUMN counted BIGINT NOT NULL DEFAULT 0;

-- The projection's cache; a check can rebuild it from order_facts.
ALTER TABLE orders ADD COLUMN amount_paid BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN amount_refunded BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN amount_disputed BIGINT NOT NULL DEFAULT 0;
-- JSON array of reasons a person should look at the order, or NULL.
ALTER TABLE orders ADD COLUMN attention TEXT;
