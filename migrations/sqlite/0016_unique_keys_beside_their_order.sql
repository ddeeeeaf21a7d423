-- The outbox's idempotency keys and the ledger's effect keys are SHA-256 digests: unique on
-- their own, every row went to a random leaf of a B-tree that outgrows the page cache, a
-- page per row (two outbox rows per event) written to the WAL and again at the checkpoint:
-- with the effect keys themselves, 60 % of the WAL frames of a processing commit
-- (BENCHMARKS.md). Both keys are digests over parts that include the order id
-- (domain::effect_key, commands::refund_key), so a key never comes with two orders: unique
-- per order is the same rule, and its index is ordered by order first, so the rows of one
-- order, and the orders a merchant numbers in sequence, share leaves. No query looks a row
-- up by its key alone. SQLite cannot drop a column's UNIQUE: both tables are rebuilt, ids
-- kept (and the outbox's AUTOINCREMENT counter, so no id is ever handed out twice).
CREATE TABLE outbox_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT    NOT NULL,
    effect_key      TEXT    NOT NULL,
    order_id        TEXT    NOT NULL,
    topic           TEXT    NOT NULL,
    sink            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    correlation_id  TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    delivered_at    INTEGER,
    last_error      TEXT,
    retries_base    INTEGER NOT NULL DEFAULT 0,
    claimed_by      TEXT,
    UNIQUE (order_id, idempotency_key)
);
INSERT INTO outbox_new (id, idempotency_key, effect_key, order_id, topic, sink, payload,
    correlation_id, status, attempts, next_attempt_at, created_at, delivered_at, last_error,
    retries_base, claimed_by)
SELECT id, idempotency_key, effect_key, order_id, topic, sink, payload, correlation_id,
    status, attempts, next_attempt_at, created_at, delivered_at, last_error, retries_base,
    claimed_by
    FROM outbox;
DELETE FROM sqlite_sequence WHERE name = 'outbox_new';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'outbox_new', seq FROM sqlite_sequence WHERE name = 'outbox';
DROP TABLE outbox;
ALTER TABLE outbox_new RENAME TO outbox;
CREATE INDEX outbox_due ON outbox (next_attempt_at, id) WHERE status IN ('pending', 'delivering');
CREATE INDEX outbox_order ON outbox (order_id, id);

CREATE TABLE order_ledger_new (
    id           INTEGER PRIMARY KEY,
    order_id     TEXT    NOT NULL,
    transition   TEXT    NOT NULL,
    status_after TEXT    NOT NULL,
    amount       INTEGER,
    currency     TEXT,
    external_ref TEXT    NOT NULL,
    effect_key   TEXT    NOT NULL,
    provider     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    occurred_at  INTEGER NOT NULL,
    recorded_at  INTEGER NOT NULL,
    entry        TEXT    NOT NULL DEFAULT 'payment',
    group_ref    TEXT,
    counted      INTEGER NOT NULL DEFAULT 0,
    UNIQUE (order_id, effect_key)
);
INSERT INTO order_ledger_new (id, order_id, transition, status_after, amount, currency,
    external_ref, effect_key, provider, event_id, occurred_at, recorded_at, entry, group_ref,
    counted)
SELECT id, order_id, transition, status_after, amount, currency, external_ref, effect_key,
    provider, event_id, occurred_at, recorded_at, entry, group_ref, counted
    FROM order_ledger;
DROP TABLE order_ledger;
ALTER TABLE order_ledger_new RENAME TO order_ledger;
CREATE INDEX order_ledger_order ON order_ledger (order_id, id);
