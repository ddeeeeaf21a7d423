-- Dashboard access: people who sign in, with a role. Sessions live in the table that
-- tower-sessions-sqlx-store creates itself (`tower_sessions`).

CREATE TABLE users (
    id                   INTEGER PRIMARY KEY,
    username             TEXT    NOT NULL UNIQUE,
    -- PHC string: $argon2id$v=19$m=…,t=…,p=…$salt$hash
    password_hash        TEXT    NOT NULL,
    -- viewer | operator | admin
    role                 TEXT    NOT NULL,
    -- 1: the password was set by someone else (one-time or reset); change it at sign-in.
    must_change_password INTEGER NOT NULL DEFAULT 0,
    disabled             INTEGER NOT NULL DEFAULT 0,
    -- When the password last changed: a session made before it is no longer valid.
    password_set_at      INTEGER NOT NULL,
    last_sign_in_at      INTEGER,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
);

-- From where: the client address of a sign-in or of a dashboard action.
ALTER TABLE audit_log ADD COLUMN source TEXT;
CREATE INDEX audit_log_actor ON audit_log (actor, id);
