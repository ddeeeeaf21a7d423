-- The consistency check (`oncehook verify` and serve's periodic job, src/verify/): one row
-- per finished run, the newest shown on the overview and in /metrics. Only the last runs are
-- kept (store::verify::record prunes the rest). Same schema as migrations/sqlite.
CREATE TABLE verify_runs (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- serve (the periodic job) | cli (`oncehook verify`)
    source           TEXT    NOT NULL,
    started_at       BIGINT  NOT NULL,
    finished_at      BIGINT  NOT NULL,
    orders_checked   BIGINT  NOT NULL,
    -- Orders whose stored status, totals, attention or ledger differ from their facts.
    drifting_orders  BIGINT  NOT NULL,
    -- Ledger entries without their outbox message.
    missing_messages BIGINT  NOT NULL,
    -- JSON array of the first drifting order ids (at most 10), for the overview's links.
    sample           TEXT    NOT NULL
);
CREATE INDEX verify_runs_finished ON verify_runs (finished_at, id);
