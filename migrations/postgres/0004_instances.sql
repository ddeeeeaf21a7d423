-- Running instances and their heartbeats; claims name the instance that made them, so a
-- dead instance's claims are released at once instead of waiting out their lease.
CREATE TABLE instances (
    instance_id  TEXT   PRIMARY KEY,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);
ALTER TABLE inbox_events ADD COLUMN claimed_by TEXT;
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
CREATE INDEX inbox_events_claimed_by ON inbox_events (claimed_by) WHERE status = 'processing';
CREATE INDEX outbox_claimed_by ON outbox (claimed_by) WHERE status = 'delivering';
