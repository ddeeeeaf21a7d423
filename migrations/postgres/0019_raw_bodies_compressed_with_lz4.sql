-- A provider's event is 2-6 KB of JSON, over the 2 KB above which PostgreSQL compresses a
-- row's long values, so every receipt compressed its raw body with pglz: 8-9 % of
-- PostgreSQL's CPU at a live 3,700 events/s (perf, BENCHMARKS.md), on the database core
-- the processor needs. lz4 takes a third of pglz's time to compress the same body, reads it
-- back faster, and stores it about as small. Servers built without lz4 (or older than 14,
-- which cannot choose) keep pglz. Only new values change: stored bodies stay as they are,
-- byte-exact either way, and nothing is rewritten.
DO $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_settings
        WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)
    ) THEN
        ALTER TABLE inbox_events ALTER COLUMN raw_body SET COMPRESSION lz4;
    END IF;
END
$$;
