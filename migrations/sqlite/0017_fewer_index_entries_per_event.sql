-- Index entries nothing needs, three to four per event (BENCHMARKS.md, 2026-12-05: 34
-- B-tree leaf inserts per event on PostgreSQL, 31 % of its WAL, and on SQLite a page each
-- B-tree a commit touches):
-- - `outbox_order (order_id, id)` and `order_ledger_order (order_id, id)` repeat the lead
--   of the unique `(order_id, key)` indexes beside them (migration 0016). An order
--   has a handful of messages and ledger rows, so every lookup by order (the order page,
--   the batch, the consistency check's ranges) is served by the unique index, and its few
--   rows are put in id order after. Two outbox rows per payment and one ledger row: three
--   entries fewer per event.
-- - `inbox_events_order` indexed every new event under a NULL order (the order is known
--   only when the event is filed) and then again under its order. Every lookup names an
--   order (`order_id = $1`, which implies NOT NULL, so both databases use a partial index):
--   the entry at receipt is gone.
-- `tests/order_lookups.rs` checks the plans and the index definitions on both databases.
DROP INDEX outbox_order;
DROP INDEX order_ledger_order;
DROP INDEX inbox_events_order;
CREATE INDEX inbox_events_order ON inbox_events (order_id, id) WHERE order_id IS NOT NULL;
