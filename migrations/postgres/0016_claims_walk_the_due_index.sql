-- A claim takes the oldest due rows of a queue, and the partial `_due` index holds exactly
-- those rows in that order: reading its first entries is the whole work. But without
-- statistics (a new table, or a server with autovacuum off between the processor's own
-- vacuums), or with statistics taken while the queue was empty, PostgreSQL expects a
-- hundred due rows at most and chooses to fetch every due row through a bitmap and sort
-- them all: with a 20,000-event backlog one claim read 2,000 pages and took 15 ms, where
-- walking the index reads 6 pages in 0.03 ms (BENCHMARKS.md). SQLite had the same trap
-- and names the index in the claim (`INDEXED BY`); PostgreSQL has no hints, so the row
-- search of a claim runs here, planned with sorting off: the one plan left without a
-- sort is the walk along `_due`, whatever the statistics say. `lock_rows`: lock the rows
-- found, skipping rows another transaction holds (the leasing claim).
CREATE FUNCTION oncehook_due_ids(
    queue REGCLASS, claimed_status TEXT, due_at BIGINT, max_rows BIGINT, lock_rows BOOLEAN)
RETURNS SETOF BIGINT
LANGUAGE plpgsql
ROWS 100
SET enable_sort = off
AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'SELECT id FROM %s WHERE status IN (''pending'', %L) AND next_attempt_at <= $1 '
        'ORDER BY next_attempt_at, id LIMIT $2 %s',
        queue, claimed_status,
        CASE WHEN lock_rows THEN 'FOR UPDATE SKIP LOCKED' ELSE '' END)
    USING due_at, max_rows;
END
$$;
