-- The same columns on both databases (SQLite is used by one process and releases every
-- earlier claim at start, so it holds no liveness lock; see the PostgreSQL migration).
ALTER TABLE instances ADD COLUMN liveness_lock INTEGER;
