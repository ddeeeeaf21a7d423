-- The consistency check (`oncehook verify` and serve's periodic job, src/verify/): one row
-- per finished run, the newest shown on the overview and in /metrics. Only the last runs are
-- kept (store::verify::record prunes the rest). Same schema as migrations/postgres.
CREATE TABLE verify_runs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    -- serve (the periodic job) | cli (`oncehook verify`)
    source           TEXT    NOT NULL,
    started_at       INTEGER NOT NULL,
    finished_at      INTEGER NOT NULL,
    orders_checked   INTEGER NOT NULL,
    -- Orders whose stored status, totals, attention or ledger differ from their facts.
    drifting_orders  INTEGER NOT NULL,
    -- Ledger entries without their outbox message.
    missing_messages INTEGER NOT NULL,
    -- JSON array of the first drifting order ids (at most 10), for the overview's links.
    sample           TEXT    NOT NULL
);
CREATE INDEX verify_runs_finished ON verify_runs (finished_at, id);
