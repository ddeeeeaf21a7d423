-- Bearer tokens for /api/v1. Only the SHA-256 of a token is stored (a token is 256 random
-- bits, so a fast hash is enough: nothing to brute-force); the token itself is shown once.
CREATE TABLE api_tokens (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- What it is for ("grafana", "ops-scripts"); unique among tokens not revoked.
    name          TEXT    NOT NULL,
    -- Hex SHA-256 of the whole token.
    token_hash    TEXT    NOT NULL UNIQUE,
    -- The token's first characters, so a person can tell which one a log line means.
    prefix        TEXT    NOT NULL,
    -- viewer | operator | admin
    role          TEXT    NOT NULL,
    created_by    TEXT    NOT NULL,
    created_at    BIGINT  NOT NULL,
    -- Unix ms; the token stops working then.
    expires_at    BIGINT  NOT NULL,
    last_used_at  BIGINT,
    revoked_at    BIGINT
);
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;
