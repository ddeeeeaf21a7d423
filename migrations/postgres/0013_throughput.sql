-- Queue and hot tables stay fast under sustained load: vacuumed and analysed after a
-- small share of their rows changed (the defaults wait for 20 % dead rows, which on a queue
-- of millions is a long tail of dead index entries every claim walks past), and without the
-- cost delay on the two queues, whose claims are the hot path. Has no effect while the
-- server runs with `autovacuum = off`; `oncehook serve` warns about that at start-up.
ALTER TABLE inbox_events SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE outbox SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE orders SET (
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE order_facts SET (
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE processed_effects SET (autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE order_ledger SET (autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE deliveries SET (autovacuum_analyze_scale_factor = 0.02);

-- The liveness lock an instance holds (a session advisory lock, objid of the two-key form):
-- PostgreSQL releases it the moment the instance's connection closes, so a restarted or
-- peer instance takes back a crashed instance's claims at once instead of waiting for its
-- heartbeat to go stale. NULL: an instance that holds none (heartbeat rule only).
ALTER TABLE instances ADD COLUMN liveness_lock BIGINT;
