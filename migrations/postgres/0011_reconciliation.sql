-- Reconciliation (src/reconcile/): the provider's truth against ours. Same schema as
-- migrations/sqlite/0011_reconciliation.sql. Times are Unix milliseconds except the
-- provider's own `created` values, which are Unix seconds as the provider writes them.

-- One row per run, per provider: what it compared, what it cost, how it ended.
CREATE TABLE reconciliation_runs (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider         TEXT    NOT NULL,
    -- serve (the periodic job) | cli | dashboard
    source           TEXT    NOT NULL,
    -- running | succeeded | failed | interrupted (its process died; a later run resumed)
    status           TEXT    NOT NULL,
    dry_run          BIGINT  NOT NULL,
    -- Lower bound of the events pass (provider `created`, seconds).
    since_s          BIGINT  NOT NULL,
    events_compared  BIGINT  NOT NULL DEFAULT 0,
    objects_compared BIGINT  NOT NULL DEFAULT 0,
    api_calls        BIGINT  NOT NULL DEFAULT 0,
    diffs_found      BIGINT  NOT NULL DEFAULT 0,
    fixed            BIGINT  NOT NULL DEFAULT 0,
    -- Why a run failed, with what it had compared by then.
    error            TEXT,
    started_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    finished_at      BIGINT
);
CREATE INDEX reconciliation_runs_provider ON reconciliation_runs (provider, id);
CREATE INDEX reconciliation_runs_status ON reconciliation_runs (status, finished_at);

-- Where the events pass stands, per provider. `event_id`/`created` name the newest event
-- a finished pass compared; the `pass_*` columns are the pass under way (newest first from
-- `pass_head_*` down to `pass_since`, `pass_cursor` the oldest event compared so far), so a
-- run that dies resumes where it stopped.
CREATE TABLE reconciliation_checkpoints (
    provider          TEXT    PRIMARY KEY,
    event_id          TEXT,
    created           BIGINT,
    pass_head_id      TEXT,
    pass_head_created BIGINT,
    pass_cursor       TEXT,
    pass_since        BIGINT,
    updated_at        BIGINT  NOT NULL
);

-- One run at a time per provider across instances: a lease, renewed while the run lives.
CREATE TABLE reconciliation_leases (
    provider   TEXT    PRIMARY KEY,
    holder     TEXT    NOT NULL,
    run_id     BIGINT,
    expires_at BIGINT  NOT NULL
);

-- Each mismatch found, once: (provider, kind, subject) is unique, so a second run over the
-- same window adds nothing. kind: missing_event | unprocessed | missing_fact |
-- status_mismatch | amount_mismatch | unknown_order | window_exceeded.
CREATE TABLE reconciliation_diffs (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider          TEXT    NOT NULL,
    kind              TEXT    NOT NULL,
    -- What the diff is about, unique within (provider, kind): an event id, an object id
    -- with the state the provider showed, a checkpoint.
    subject           TEXT    NOT NULL,
    order_id          TEXT,
    provider_event_id TEXT,
    object_id         TEXT,
    -- open | fixed | resolved
    state             TEXT    NOT NULL,
    detail            TEXT    NOT NULL,
    -- What was done (fixed) or why it was accepted (resolved), and by whom.
    resolution        TEXT,
    closed_by         TEXT,
    -- The synthesized or fetched event a fix ingested, if any.
    fix_event_id      TEXT,
    first_run_id      BIGINT  NOT NULL,
    last_run_id       BIGINT  NOT NULL,
    found_at          BIGINT  NOT NULL,
    closed_at         BIGINT,
    UNIQUE (provider, kind, subject)
);
CREATE INDEX reconciliation_diffs_state ON reconciliation_diffs (state, kind, id);
CREATE INDEX reconciliation_diffs_order ON reconciliation_diffs (order_id, id);
CREATE INDEX reconciliation_diffs_closed ON reconciliation_diffs (closed_at, id);

-- Payments the events pass saw at the provider but we know no order for: the objects pass
-- of the same run fetches them (kept in the database, not memory, whatever the volume).
CREATE TABLE reconciliation_pending_objects (
    run_id    BIGINT  NOT NULL,
    object_id TEXT    NOT NULL,
    PRIMARY KEY (run_id, object_id)
);
