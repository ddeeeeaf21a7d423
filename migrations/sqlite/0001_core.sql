-- oncehook core schema (SQLite). Times are Unix milliseconds (INTEGER), money is integer
-- minor units plus an ISO currency code. The same columns exist on PostgreSQL.

-- Every accepted event, raw body byte-exact; UNIQUE (provider, event_id) makes a
-- redelivery a no-op insert.
CREATE TABLE inbox_events (
    id              INTEGER PRIMARY KEY,
    provider        TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    event_type      TEXT,
    api_version     TEXT,
    raw_body        BLOB    NOT NULL,
    correlation_id  TEXT    NOT NULL,
    received_at     INTEGER NOT NULL,
    -- pending | processing | applied | duplicate | stale | refused | ignored | failed
    status          TEXT    NOT NULL,
    reason          TEXT,
    order_id        TEXT,
    effect_key      TEXT,
    -- Claims so far; the completing UPDATE is fenced on it so a worker whose lease
    -- expired cannot overwrite a newer claim.
    attempts        INTEGER NOT NULL DEFAULT 0,
    -- When the row is next due: now for new rows, lease expiry while processing,
    -- backoff after a transient failure.
    next_attempt_at INTEGER NOT NULL,
    processed_at    INTEGER,
    UNIQUE (provider, event_id)
);
CREATE INDEX inbox_events_due ON inbox_events (next_attempt_at, id)
    WHERE status IN ('pending', 'processing');
CREATE INDEX inbox_events_order ON inbox_events (order_id, id);
CREATE INDEX inbox_events_status ON inbox_events (status, id);

-- Every receipt, duplicates included: the duplicate rate comes from here.
CREATE TABLE deliveries (
    id             INTEGER PRIMARY KEY,
    provider       TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    duplicate      INTEGER NOT NULL,
    correlation_id TEXT    NOT NULL,
    body_sha256    TEXT    NOT NULL,
    received_at    INTEGER NOT NULL
);
CREATE INDEX deliveries_event ON deliveries (provider, event_id, id);
CREATE INDEX deliveries_received ON deliveries (received_at);

-- One row per business change; the PRIMARY KEY decides who wins.
CREATE TABLE processed_effects (
    effect_key   TEXT PRIMARY KEY,
    transition   TEXT    NOT NULL,
    order_id     TEXT    NOT NULL,
    external_ref TEXT    NOT NULL,
    provider     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    -- applied | stale | refused
    outcome      TEXT    NOT NULL,
    applied_at   INTEGER NOT NULL
);
CREATE INDEX processed_effects_order ON processed_effects (order_id, applied_at);

CREATE TABLE orders (
    order_id       TEXT PRIMARY KEY,
    status         TEXT    NOT NULL,
    currency       TEXT,
    -- The guard: stamp of the last applied transition.
    last_event_at  INTEGER,
    last_sequence  INTEGER,
    last_rank      INTEGER,
    last_event_id  TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

-- Where an event naming only a payment reference finds its order.
CREATE TABLE payment_refs (
    provider  TEXT NOT NULL,
    reference TEXT NOT NULL,
    order_id  TEXT NOT NULL,
    PRIMARY KEY (provider, reference)
);

CREATE TABLE order_ledger (
    id           INTEGER PRIMARY KEY,
    order_id     TEXT    NOT NULL,
    transition   TEXT    NOT NULL,
    status_after TEXT    NOT NULL,
    amount       INTEGER,
    currency     TEXT,
    external_ref TEXT    NOT NULL,
    effect_key   TEXT    NOT NULL UNIQUE,
    provider     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    occurred_at  INTEGER NOT NULL,
    recorded_at  INTEGER NOT NULL
);
CREATE INDEX order_ledger_order ON order_ledger (order_id, id);

-- Events that arrived too late (stale) or that the state machine refused.
CREATE TABLE stale_events (
    id           INTEGER PRIMARY KEY,
    order_id     TEXT    NOT NULL,
    provider     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    transition   TEXT    NOT NULL,
    -- stale | refused
    kind         TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    order_status TEXT    NOT NULL,
    amount       INTEGER,
    currency     TEXT,
    occurred_at  INTEGER NOT NULL,
    recorded_at  INTEGER NOT NULL
);
CREATE INDEX stale_events_order ON stale_events (order_id, id);

-- External effects leave only through here, written in the effect's transaction.
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY,
    idempotency_key TEXT    NOT NULL UNIQUE,
    effect_key      TEXT    NOT NULL,
    order_id        TEXT    NOT NULL,
    topic           TEXT    NOT NULL,
    sink            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    correlation_id  TEXT    NOT NULL,
    -- pending | delivering | delivered
    status          TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    delivered_at    INTEGER,
    last_error      TEXT
);
CREATE INDEX outbox_due ON outbox (next_attempt_at, id) WHERE status IN ('pending', 'delivering');
CREATE INDEX outbox_order ON outbox (order_id, id);
