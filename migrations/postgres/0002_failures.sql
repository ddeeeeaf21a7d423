-- Failure handling: dead letters with their redrives, outbox delivery attempts, and the
-- audit log of every action that changes data.

-- Claims since the last redrive count against the retry limit; the fence stays `attempts`.
ALTER TABLE inbox_events ADD COLUMN retries_base BIGINT NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN retries_base BIGINT NOT NULL DEFAULT 0;

CREATE TABLE dead_letters (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- processor | outbox | provider_command
    stage            TEXT    NOT NULL,
    -- The sink for outbox items, else NULL.
    sink             TEXT,
    -- inbox_events.id or outbox.id
    source_id        BIGINT NOT NULL,
    provider         TEXT,
    event_id         TEXT,
    event_type       TEXT,
    order_id         TEXT,
    payload          BYTEA    NOT NULL,
    -- transient | permanent | business | unknown
    error_class      TEXT    NOT NULL,
    last_error       TEXT    NOT NULL,
    -- JSON array of {"at": ms, "class": …, "error": …}, oldest first.
    error_history    TEXT    NOT NULL,
    attempts         BIGINT NOT NULL,
    first_attempt_at BIGINT NOT NULL,
    last_attempt_at  BIGINT NOT NULL,
    correlation_id   TEXT    NOT NULL,
    -- open | redriven | resolved | discarded
    status           TEXT    NOT NULL,
    resolve_by       BIGINT NOT NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    UNIQUE (stage, source_id)
);
CREATE INDEX dead_letters_status ON dead_letters (status, id);
CREATE INDEX dead_letters_class ON dead_letters (error_class, id);
CREATE INDEX dead_letters_event ON dead_letters (event_id);

CREATE TABLE redrives (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dead_letter_id BIGINT NOT NULL,
    actor          TEXT    NOT NULL,
    reason         TEXT,
    -- requeued | skipped (not open) | dry-run prediction
    outcome        TEXT    NOT NULL,
    dry_run        BIGINT NOT NULL,
    at             BIGINT NOT NULL
);
CREATE INDEX redrives_dead_letter ON redrives (dead_letter_id, id);

CREATE TABLE outbox_attempts (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id        BIGINT NOT NULL,
    attempt          BIGINT NOT NULL,
    started_at       BIGINT NOT NULL,
    duration_ms      BIGINT NOT NULL,
    status_code      BIGINT,
    error            TEXT,
    response_excerpt TEXT
);
CREATE INDEX outbox_attempts_outbox ON outbox_attempts (outbox_id, id);

CREATE TABLE audit_log (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor   TEXT    NOT NULL,
    action  TEXT    NOT NULL,
    target  TEXT    NOT NULL,
    reason  TEXT,
    details TEXT,
    at      BIGINT NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at);

-- Errors of earlier attempts, JSON array like dead_letters.error_history.
ALTER TABLE inbox_events ADD COLUMN error_history TEXT;
