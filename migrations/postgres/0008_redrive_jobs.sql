-- Bulk redrives, running and finished: who started which selection, how far it got, how
-- it ended. Kept in the database so every instance's dead-letter page shows every job; the
-- per-item record stays in `redrives` and `audit_log`.
CREATE TABLE redrive_jobs (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor        TEXT    NOT NULL,
    -- The dead-letter filter it covers, as a query string; empty for everything open.
    selection    TEXT    NOT NULL,
    -- The instance running it (store::instances).
    instance_id  TEXT    NOT NULL,
    started_at   BIGINT  NOT NULL,
    -- NULL while the matching dead letters are still being selected.
    total        BIGINT,
    done         BIGINT  NOT NULL DEFAULT 0,
    -- Written by the running instance every few hundred ms: an unfinished job whose
    -- updated_at is old was cut off (its instance stopped).
    updated_at   BIGINT  NOT NULL,
    finished_at  BIGINT,
    -- "998 requeued, 2 skipped", or why it stopped.
    summary      TEXT
);
