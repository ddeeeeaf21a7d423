-- The order page lists an order's dead letters; the overview reads per-minute rollups.
CREATE INDEX dead_letters_order ON dead_letters (order_id, id);

-- The overview's KPIs: counts per minute, provider and metric, kept as events are received
-- and processed (written behind, every few seconds, by each instance: values add up).
CREATE TABLE minute_stats (
    minute   BIGINT NOT NULL,
    provider TEXT   NOT NULL,
    metric   TEXT   NOT NULL,
    value    BIGINT NOT NULL,
    PRIMARY KEY (minute, provider, metric)
);

-- Inbox filters: an event id without its provider, and the correlation id of any delivery.
CREATE INDEX inbox_events_event ON inbox_events (event_id);
CREATE INDEX deliveries_correlation ON deliveries (correlation_id);
