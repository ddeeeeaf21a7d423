-- Who a token acts for: a dashboard user (its id), or NULL for a token made with
-- `oncehook token add` on the server. A user's token works only while the user is enabled
-- and never with more than the user's current role.
ALTER TABLE api_tokens ADD COLUMN maker_user_id BIGINT REFERENCES users (id);
-- Tokens made before this column: a maker whose name is a user's is that user (the
-- dashboard stored the username; the CLI stores `$USER@cli`, which names no user).
UPDATE api_tokens SET maker_user_id = (SELECT u.id FROM users u WHERE u.username = api_tokens.created_by);

-- The inbox's type and time filters, newest first, served by an index each.
CREATE INDEX inbox_events_type ON inbox_events (event_type, id);
CREATE INDEX inbox_events_received ON inbox_events (received_at, id);
