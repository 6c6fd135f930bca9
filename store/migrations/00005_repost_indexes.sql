-- +goose NO TRANSACTION
-- +goose Up
-- The reposts of a post, oldest first: which entry of a home feed shows an
-- original (the first), and what its delete deletes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS posts_repost_of_idx ON posts (repost_of, id)
    WHERE repost_of IS NOT NULL AND deleted_at IS NULL;
-- One live repost of a post per user: a second repost answers the first.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS posts_one_repost_idx ON posts (author_id, repost_of)
    WHERE repost_of IS NOT NULL AND deleted_at IS NULL;
