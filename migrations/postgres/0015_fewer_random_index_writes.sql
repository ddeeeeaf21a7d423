-- Every receipt wrote one entry at a random place in this index (event ids are random),
-- on top of the same key in the inbox's UNIQUE (provider, event_id): a page dirtied per
-- event, written to the log in each commit and again at the next checkpoint. A lookup by
-- event id without its provider now walks the few distinct providers of that unique index
-- and probes it once per provider (store::read::ids_of_event).
DROP INDEX inbox_events_event;
