-- +goose Up
-- The version of each user's graph: every change to whom a user follows
-- takes the next one, in the transaction that makes the change (the row
-- lock orders a user's changes), also a change that finds nothing to do.
-- Redis applies the state PostgreSQL has with its version, so that a change
-- applied late is seen to be stale (feed/lua/follow.lua). A user without a
-- row is at version 0.
CREATE TABLE IF NOT EXISTS graph_versions (
    user_id bigint PRIMARY KEY,
    version bigint NOT NULL
);
