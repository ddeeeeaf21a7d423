-- Money as facts (SQLite); see migrations/postgres/0003_money_facts.sql for the same schema.
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
    class        INTEGER NOT NULL,
    at_ms        INTEGER NOT NULL,
    sequence     INTEGER,
    rank         INTEGER NOT NULL,
    amount       INTEGER,
    money_seen   INTEGER NOT NULL,
    canceled_at  INTEGER,
    provider     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (order_id, kind, resource_id)
);

-- The ledger holds entries, not transitions: a fact (payment, refund, dispute), a reversal
-- (refund_reversal, dispute_closed) or the unexplained part of a running total
-- (refund_observed). `amount` is the fact's own amount, `counted` what it adds to its total
-- (signed). `effect_key` is the entry's key: sha256(entry, order, resource).
ALTER TABLE order_ledger ADD COLUMN entry TEXT NOT NULL DEFAULT 'payment';
ALTER TABLE order_ledger ADD COLUMN group_ref TEXT;
ALTER TABLE order_ledger ADD COLUMN counted INTEGER NOT NULL DEFAULT 0;

-- The projection's cache; a check can rebuild it from order_facts.
ALTER TABLE orders ADD COLUMN amount_paid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN amount_refunded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN amount_disputed INTEGER NOT NULL DEFAULT 0;
-- JSON array of reasons a person should look at the order, or NULL.
ALTER TABLE orders ADD COLUMN attention TEXT;

-- SQLite reuses INTEGER PRIMARY KEY ids once a table's newest rows are deleted (retention),
-- so a new failing event could take the id of an old one and reopen its unrelated dead
-- letter (dead_letters is unique on (stage, source_id)). AUTOINCREMENT never reuses ids:
-- rebuild the three tables with it.
CREATE TABLE inbox_events_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    provider        TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    event_type      TEXT,
    api_version     TEXT,
    raw_body        BLOB    NOT NULL,
    correlation_id  TEXT    NOT NULL,
    received_at     INTEGER NOT NULL,
    status          TEXT    NOT NULL,
    reason          TEXT,
    order_id        TEXT,
    effect_key      TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    processed_at    INTEGER,
    retries_base    INTEGER NOT NULL DEFAULT 0,
    error_history   TEXT,
    UNIQUE (provider, event_id)
);
INSERT INTO inbox_events_new (id, provider, event_id, event_type, api_version, raw_body,
    correlation_id, received_at, status, reason, order_id, effect_key, attempts,
    next_attempt_at, processed_at, retries_base, error_history)
SELECT id, provider, event_id, event_type, api_version, raw_body, correlation_id, received_at,
    status, reason, order_id, effect_key, attempts, next_attempt_at, processed_at,
    retries_base, error_history FROM inbox_events;
DROP TABLE inbox_events;
ALTER TABLE inbox_events_new RENAME TO inbox_events;
CREATE INDEX inbox_events_due ON inbox_events (next_attempt_at, id)
    WHERE status IN ('pending', 'processing');
CREATE INDEX inbox_events_order ON inbox_events (order_id, id);
CREATE INDEX inbox_events_status ON inbox_events (status, id);

CREATE TABLE outbox_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT    NOT NULL UNIQUE,
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
    retries_base    INTEGER NOT NULL DEFAULT 0
);
INSERT INTO outbox_new (id, idempotency_key, effect_key, order_id, topic, sink, payload,
    correlation_id, status, attempts, next_attempt_at, created_at, delivered_at, last_error,
    retries_base)
SELECT id, idempotency_key, effect_key, order_id, topic, sink, payload, correlation_id,
    status, attempts, next_attempt_at, created_at, delivered_at, last_error, retries_base
    FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_new RENAME TO outbox;
CREATE INDEX outbox_due ON outbox (next_attempt_at, id) WHERE status IN ('pending', 'delivering');
CREATE INDEX outbox_order ON outbox (order_id, id);
CREATE TABLE dead_letters_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    -- processor | outbox | provider_command
    stage            TEXT    NOT NULL,
    -- The sink for outbox items, else NULL.
    sink             TEXT,
    -- inbox_events.id or outbox.id
    source_id        INTEGER NOT NULL,
    provider         TEXT,
    event_id         TEXT,
    event_type       TEXT,
    order_id         TEXT,
    payload          BLOB    NOT NULL,
    -- transient | permanent | business | unknown
    error_class      TEXT    NOT NULL,
    last_error       TEXT    NOT NULL,
    -- JSON array of {"at": ms, "class": …, "error": …}, oldest first.
    error_history    TEXT    NOT NULL,
    attempts         INTEGER NOT NULL,
    first_attempt_at INTEGER NOT NULL,
    last_attempt_at  INTEGER NOT NULL,
    correlation_id   TEXT    NOT NULL,
    -- open | redriven | resolved | discarded
    status           TEXT    NOT NULL,
    resolve_by       INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    UNIQUE (stage, source_id)
);
INSERT INTO dead_letters_new SELECT * FROM dead_letters;
DROP TABLE dead_letters;
ALTER TABLE dead_letters_new RENAME TO dead_letters;
CREATE INDEX dead_letters_status ON dead_letters (status, id);
CREATE INDEX dead_letters_class ON dead_letters (error_class, id);
CREATE INDEX dead_letters_event ON dead_letters (event_id);
