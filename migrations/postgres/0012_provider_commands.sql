-- Commands oncehook sends to a provider (refunds), asked for by an operator. A command is
-- written in one transaction with its outbox row (the relay sends it) and its audit row.
-- Its idempotency key names the business operation (`order:{id}:refund:{n}`) and is the
-- outbox row's key too, so every retry, restart and redrive sends the same one.
-- Same schema as migrations/sqlite.
CREATE TABLE provider_commands (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id           TEXT    NOT NULL,
    -- refund
    kind               TEXT    NOT NULL,
    -- 1, 2, … per order and kind: the n of the key.
    seq                BIGINT  NOT NULL,
    idempotency_key    TEXT    NOT NULL UNIQUE,
    provider           TEXT    NOT NULL,
    -- The payment the command acts on (a payment intent).
    payment_ref        TEXT    NOT NULL,
    amount             BIGINT  NOT NULL,
    currency           TEXT    NOT NULL,
    reason             TEXT    NOT NULL,
    -- requested | sent | confirmed | failed | cancelled
    state              TEXT    NOT NULL,
    requested_by       TEXT    NOT NULL,
    requested_at       BIGINT  NOT NULL,
    outbox_id          BIGINT  NOT NULL,
    -- The provider's object (re_…) once it answered 2xx.
    provider_object_id TEXT,
    sent_at            BIGINT ,
    -- The event whose money confirmed it.
    confirmed_event_id TEXT,
    confirmed_at       BIGINT ,
    -- The provider's refusal (type, code, message) when dead-lettered.
    error              TEXT,
    updated_at         BIGINT  NOT NULL,
    UNIQUE (order_id, kind, seq)
);
CREATE INDEX provider_commands_order ON provider_commands (order_id, id);
CREATE INDEX provider_commands_outbox ON provider_commands (outbox_id);
CREATE INDEX provider_commands_object ON provider_commands (provider_object_id);
CREATE INDEX provider_commands_state ON provider_commands (state, requested_at);

-- Our own API's Idempotency-Key (src/api/idempotency.rs): per token and key, the request's
-- digest and, once it finished, its answer, replayed for 24 hours.
CREATE TABLE api_idempotency (
    scope           TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    request_digest  TEXT    NOT NULL,
    -- NULL while the first request with the key is still running.
    response_status BIGINT,
    response_body   BYTEA,
    created_at      BIGINT  NOT NULL,
    PRIMARY KEY (scope, idempotency_key)
);
CREATE INDEX api_idempotency_created ON api_idempotency (created_at);
