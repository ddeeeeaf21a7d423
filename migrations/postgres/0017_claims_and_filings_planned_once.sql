-- The two per-batch statements that cost PostgreSQL the most planning, planned once per
-- connection instead of on every batch. The write pool plans every statement afresh
-- (`plan_cache_mode = force_custom_plan`: a generic plan made while a table was empty
-- would keep its sequential scans as the table grows), and at a live stream's small
-- batches planning was 30 % of the statements' time (pg_stat_statements, 1,000 events/s:
-- the filing's join UPDATE 0.35 ms of planning per batch, the claim's dynamic search
-- planned inside every call). Here the plans cannot go wrong with the data: each of these
-- statements has one sensible plan (walk the `_due` index from its head; find each filed
-- row by its primary key), and the settings below leave the planner no other.

-- The claim's row search (migration 0016), with the two queues' searches written out so
-- PL/pgSQL keeps their plans; any other table still goes through EXECUTE.
CREATE OR REPLACE FUNCTION oncehook_due_ids(
    queue REGCLASS, claimed_status TEXT, due_at BIGINT, max_rows BIGINT, lock_rows BOOLEAN)
RETURNS SETOF BIGINT
LANGUAGE plpgsql
ROWS 100
SET enable_sort = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF queue = 'inbox_events'::regclass AND claimed_status = 'processing' THEN
        IF lock_rows THEN
            RETURN QUERY SELECT id FROM inbox_events
                WHERE status IN ('pending', 'processing') AND next_attempt_at <= due_at
                ORDER BY next_attempt_at, id LIMIT max_rows FOR UPDATE SKIP LOCKED;
        ELSE
            RETURN QUERY SELECT id FROM inbox_events
                WHERE status IN ('pending', 'processing') AND next_attempt_at <= due_at
                ORDER BY next_attempt_at, id LIMIT max_rows;
        END IF;
    ELSIF queue = 'outbox'::regclass AND claimed_status = 'delivering' AND lock_rows THEN
        RETURN QUERY SELECT id FROM outbox
            WHERE status IN ('pending', 'delivering') AND next_attempt_at <= due_at
            ORDER BY next_attempt_at, id LIMIT max_rows FOR UPDATE SKIP LOCKED;
    ELSE
        RETURN QUERY EXECUTE format(
            'SELECT id FROM %s WHERE status IN (''pending'', %L) AND next_attempt_at <= $1 '
            'ORDER BY next_attempt_at, id LIMIT $2 %s',
            queue, claimed_status,
            CASE WHEN lock_rows THEN 'FOR UPDATE SKIP LOCKED' ELSE '' END)
        USING due_at, max_rows;
    END IF;
END
$$;

-- A batch's filing: each claimed row gets its final word, fenced on the claim (the row
-- still holds the attempts the claim saw and is not filed yet; `also` is the status a
-- locked claim may also find). `batch` is a JSON array of objects with the keys of the
-- record below. Returns the ids filed; a claimed id missing from them was fenced off.
CREATE FUNCTION oncehook_file_inbox(batch JSONB, filed_at BIGINT)
RETURNS SETOF BIGINT
LANGUAGE plpgsql
ROWS 32
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
BEGIN
    RETURN QUERY UPDATE inbox_events AS e
        SET status = v.status, reason = v.reason, order_id = v.order_id,
            effect_key = v.effect_key, processed_at = filed_at, attempts = v.attempt
        FROM jsonb_to_recordset(batch) AS v (
            id BIGINT, attempt BIGINT, seen BIGINT, also TEXT, status TEXT, reason TEXT,
            order_id TEXT, effect_key TEXT)
        WHERE e.id = v.id AND e.attempts = v.seen AND e.status IN ('processing', v.also)
        RETURNING e.id;
END
$$;
