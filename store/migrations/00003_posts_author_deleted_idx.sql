-- +goose NO TRANSACTION
-- +goose Up
-- An author's deleted posts, which an unfollow takes out of a feed too (a
-- post deleted in PostgreSQL stays in feeds until its delete reaches
-- Redis): small, beside posts_author_id_idx of the live ones.
CREATE INDEX CONCURRENTLY IF NOT EXISTS posts_author_deleted_idx ON posts (author_id, id DESC) WHERE deleted_at IS NOT NULL;
