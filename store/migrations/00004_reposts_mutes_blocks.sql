-- +goose Up
-- Reposts are posts: a row with the id of the post it reposts (always an
-- original: reposting a repost reposts its original), from the same
-- sequence, and an empty body. No foreign key: a post's row is never locked
-- for it, and a deleted original deletes its reposts in its own
-- transaction (store.DeletePost).
ALTER TABLE posts ADD COLUMN IF NOT EXISTS repost_of bigint;

-- Mutes and blocks: who hides whom. Each change takes the next version of
-- the graph of every user whose home feed it changes (graph_versions), as
-- follows do, so that Redis applies them in order.
CREATE TABLE IF NOT EXISTS mutes (
    user_id    bigint      NOT NULL CHECK (user_id > 0),
    muted_id   bigint      NOT NULL CHECK (muted_id > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, muted_id),
    CHECK (user_id <> muted_id)
);
-- The listing, newest first with a (created_at, id) keyset cursor.
CREATE INDEX IF NOT EXISTS mutes_listing_idx ON mutes (user_id, created_at DESC, muted_id DESC);

CREATE TABLE IF NOT EXISTS blocks (
    blocker_id bigint      NOT NULL CHECK (blocker_id > 0),
    blocked_id bigint      NOT NULL CHECK (blocked_id > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (blocker_id, blocked_id),
    CHECK (blocker_id <> blocked_id)
);
CREATE INDEX IF NOT EXISTS blocks_listing_idx ON blocks (blocker_id, created_at DESC, blocked_id DESC);
-- Who blocks a user: a block hides both ways.
CREATE INDEX IF NOT EXISTS blocks_blocked_idx ON blocks (blocked_id, blocker_id);
