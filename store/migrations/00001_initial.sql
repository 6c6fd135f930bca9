-- Version 1: the schema as the unversioned `newsfeed migrate` left it (the
-- schema.sql it applied until migrations were numbered).
--
-- On a new database this creates everything, in one transaction. A database
-- that an earlier `migrate` made has no version yet and runs it too: there
-- every statement finds its object in place, and one that an older
-- schema.sql made gets what it lacks (columns added since, an owned
-- sequence, an index). That deploy must not stall the service either, so a
-- statement that would lock an existing table (ALTER, CREATE INDEX) runs only
-- where the catalog shows it is missing (the DO blocks): on a current
-- database this migration reads catalogs, locks no table and records
-- version 1. CREATE ... IF NOT EXISTS of an existing relation takes no lock.
--
-- Only outbox_chunk_idx was ever added to an existing table, with its two
-- columns: a database that lacks it gets both here, the index built in the
-- transaction that holds outbox for the ALTERs, over values that are all NULL.

-- +goose Up

-- Post ids double as Redis sorted-set scores, which are float64: the sequence
-- stops at 2^53-1 so that every score is exact (mastodon learned this late).
CREATE SEQUENCE IF NOT EXISTS posts_id_seq AS bigint MAXVALUE 9007199254740991;

CREATE TABLE IF NOT EXISTS posts (
    id              bigint PRIMARY KEY DEFAULT nextval('posts_id_seq'),
    author_id       bigint      NOT NULL CHECK (author_id > 0),
    body            text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    deleted_at      timestamptz,
    -- Idempotency-Key of the request that created the post, unique per author.
    idempotency_key text        CHECK (length(idempotency_key) <= 255)
);

-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_depend
                   WHERE classid = 'pg_class'::regclass AND objid = 'posts_id_seq'::regclass
                     AND refobjid = 'posts'::regclass AND deptype = 'a') THEN
        ALTER SEQUENCE posts_id_seq OWNED BY posts.id;
    END IF;
    -- An author's own posts, newest first; also the per-followee probe of feed rebuilds.
    IF to_regclass('posts_author_id_idx') IS NULL THEN
        CREATE INDEX posts_author_id_idx ON posts (author_id, id DESC) WHERE deleted_at IS NULL;
    END IF;
    IF to_regclass('posts_idempotency_key_idx') IS NULL THEN
        CREATE UNIQUE INDEX posts_idempotency_key_idx ON posts (author_id, idempotency_key)
            WHERE idempotency_key IS NOT NULL;
    END IF;
END $$;
-- +goose StatementEnd

CREATE TABLE IF NOT EXISTS follows (
    follower_id bigint      NOT NULL CHECK (follower_id > 0),
    followee_id bigint      NOT NULL CHECK (followee_id > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (followee_id, follower_id),
    CHECK (follower_id <> followee_id)
);

-- +goose StatementBegin
DO $$
BEGIN
    -- The primary key serves fan-out paging (followee_id, follower_id > last).
    -- Listings are newest first with a (created_at, id) keyset cursor.
    IF to_regclass('follows_followers_idx') IS NULL THEN
        CREATE INDEX follows_followers_idx ON follows (followee_id, created_at DESC, follower_id DESC);
    END IF;
    IF to_regclass('follows_following_idx') IS NULL THEN
        CREATE INDEX follows_following_idx ON follows (follower_id, created_at DESC, followee_id DESC);
    END IF;
END $$;
-- +goose StatementEnd

-- Follower counts, kept as follows come and go, so that fan-out can decide
-- "push or pull" without counting a million rows per post.
CREATE TABLE IF NOT EXISTS follower_counts (
    user_id   bigint PRIMARY KEY,
    followers bigint NOT NULL DEFAULT 0,
    -- Set once the author's posts go to their timeline instead of feeds
    -- (a celebrity), never cleared: readers keep merging that timeline.
    pulled    boolean NOT NULL DEFAULT false
);

-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'follower_counts'::regclass AND attname = 'pulled') THEN
        ALTER TABLE follower_counts ADD COLUMN pulled boolean NOT NULL DEFAULT false;
    END IF;
END $$;
-- +goose StatementEnd

-- The transactional outbox: one row per delivery intent, written in the same
-- transaction as the change it announces.
--
--   pending    waiting to be published; due_at = earliest next attempt
--   publishing claimed by a dispatcher; due_at = lease expiry
--   published  in the queue; due_at = when to publish again if no worker
--              has reported the fan-out finished (lost ticket)
--   done       fan-out finished; deleted after outbox.retention
--   dead       gave up after outbox.max_attempts; last_error says why,
--              died_at when (`newsfeed outbox dead` lists them)
CREATE TABLE IF NOT EXISTS outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_type   text        NOT NULL,
    payload      jsonb       NOT NULL,
    status       text        NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'publishing', 'published', 'done', 'dead')),
    -- attempts counts claims (publications); failures counts failed
    -- attempts, and only failures decide when a row is dead: a ticket lost
    -- with Redis and published again has not failed.
    attempts     integer     NOT NULL DEFAULT 0,
    failures     integer     NOT NULL DEFAULT 0,
    due_at       timestamptz NOT NULL DEFAULT now(),
    -- The stream entry id of the last publication: a row due again whose
    -- ticket is still in the stream (workers slow or down) is not published twice.
    ticket       text,
    -- Chunked fan-out: a big post.created row splits into fanout.chunk rows
    -- (parent_id, chunk_no) that any worker can take; the parent counts the
    -- chunks left and is done when the last one is.
    parent_id    bigint,
    chunk_no     integer,
    chunks_left  integer,
    last_error   text,
    -- The W3C traceparent of the span that wrote the row (the API request's
    -- create, or the fan-out that split it into chunks), NULL when nothing
    -- was traced: the dispatcher's publish is its child, so that one post's
    -- delivery is one trace across processes.
    trace_context text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    finished_at  timestamptz,
    died_at      timestamptz
);

-- +goose StatementBegin
DO $$
BEGIN
    -- Columns that later versions of schema.sql added (none rewrites the
    -- table: no volatile default).
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'failures') THEN
        ALTER TABLE outbox ADD COLUMN failures integer NOT NULL DEFAULT 0;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'ticket') THEN
        ALTER TABLE outbox ADD COLUMN ticket text;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'parent_id') THEN
        ALTER TABLE outbox ADD COLUMN parent_id bigint;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'chunk_no') THEN
        ALTER TABLE outbox ADD COLUMN chunk_no integer;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'chunks_left') THEN
        ALTER TABLE outbox ADD COLUMN chunks_left integer;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'trace_context') THEN
        ALTER TABLE outbox ADD COLUMN trace_context text;
    END IF;
    -- When a row was parked dead (NULL for rows parked before this column).
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'died_at') THEN
        ALTER TABLE outbox ADD COLUMN died_at timestamptz;
    END IF;

    -- A parent splits once, however often its ticket is delivered.
    IF to_regclass('outbox_chunk_idx') IS NULL THEN
        CREATE UNIQUE INDEX outbox_chunk_idx ON outbox (parent_id, chunk_no) WHERE parent_id IS NOT NULL;
    END IF;
    -- The claim query reads only rows that still need a dispatcher: this
    -- partial index stays small however many finished rows wait for the cleaner.
    IF to_regclass('outbox_due_idx') IS NULL THEN
        CREATE INDEX outbox_due_idx ON outbox (due_at, id)
            WHERE status IN ('pending', 'publishing', 'published');
    END IF;
    IF to_regclass('outbox_dead_idx') IS NULL THEN
        CREATE INDEX outbox_dead_idx ON outbox (id) WHERE status = 'dead';
    END IF;
    IF to_regclass('outbox_finished_idx') IS NULL THEN
        CREATE INDEX outbox_finished_idx ON outbox (finished_at) WHERE status = 'done';
    END IF;
END $$;
-- +goose StatementEnd

-- Posts that a post.created fan-out sent to their author's timeline instead
-- of the followers' feeds (a celebrity's): their delete leaves the feeds
-- alone, since none got the post. pushed is set, for good, when another
-- handling of the same event pushed the post after all (a redelivery once
-- the author fell below the threshold) or may have (a handling before a
-- pull), so that the delete cleans the feeds. No foreign key: a post's row
-- is never locked for this.
CREATE TABLE IF NOT EXISTS pulled_posts (
    post_id bigint  PRIMARY KEY,
    pushed  boolean NOT NULL DEFAULT false
);
