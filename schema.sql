-- newsfeed schema: the whole of it, as one file to read. It is not applied:
-- `newsfeed migrate` (and `newsfeed all`) apply the numbered migrations of
-- store/migrations, built into the binary, and record them (goose); the
-- history of the schema is that list of files. This file is checked, not
-- generated: store/TestMigrationsProduceSchemaSQL applies it to one empty
-- database and the migrations to another and requires the same catalog
-- (tables, columns in order with types, defaults and nullability,
-- constraints, indexes, sequences, ...). A migration that changes the schema
-- changes this file the same way: an added column goes last in its CREATE
-- TABLE. docs/MIGRATIONS.md says how to add one.

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
    idempotency_key text        CHECK (length(idempotency_key) <= 255),
    -- A repost: the id of the original it reposts (its body is empty).
    repost_of       bigint
);
ALTER SEQUENCE posts_id_seq OWNED BY posts.id;

-- An author's own posts, newest first; also the per-followee probe of feed rebuilds.
CREATE INDEX IF NOT EXISTS posts_author_id_idx ON posts (author_id, id DESC) WHERE deleted_at IS NULL;
-- An author's deleted posts, which an unfollow takes out of a feed too.
CREATE INDEX IF NOT EXISTS posts_author_deleted_idx ON posts (author_id, id DESC) WHERE deleted_at IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS posts_idempotency_key_idx ON posts (author_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The reposts of a post, oldest first: which entry of a home feed shows an
-- original (the first), and what its delete deletes.
CREATE INDEX IF NOT EXISTS posts_repost_of_idx ON posts (repost_of, id)
    WHERE repost_of IS NOT NULL AND deleted_at IS NULL;
-- One live repost of a post per user.
CREATE UNIQUE INDEX IF NOT EXISTS posts_one_repost_idx ON posts (author_id, repost_of)
    WHERE repost_of IS NOT NULL AND deleted_at IS NULL;

CREATE TABLE IF NOT EXISTS follows (
    follower_id bigint      NOT NULL CHECK (follower_id > 0),
    followee_id bigint      NOT NULL CHECK (followee_id > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (followee_id, follower_id),
    CHECK (follower_id <> followee_id)
);
-- The primary key serves fan-out paging (followee_id, follower_id > last).
-- Listings are newest first with a (created_at, id) keyset cursor.
CREATE INDEX IF NOT EXISTS follows_followers_idx ON follows (followee_id, created_at DESC, follower_id DESC);
CREATE INDEX IF NOT EXISTS follows_following_idx ON follows (follower_id, created_at DESC, followee_id DESC);

-- Follower counts, kept as follows come and go, so that fan-out can decide
-- "push or pull" without counting a million rows per post.
CREATE TABLE IF NOT EXISTS follower_counts (
    user_id   bigint PRIMARY KEY,
    followers bigint NOT NULL DEFAULT 0,
    -- Set once the author's posts go to their timeline instead of feeds
    -- (a celebrity), never cleared: readers keep merging that timeline.
    pulled    boolean NOT NULL DEFAULT false
);

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
-- A parent splits once, however often its ticket is delivered.
CREATE UNIQUE INDEX IF NOT EXISTS outbox_chunk_idx ON outbox (parent_id, chunk_no) WHERE parent_id IS NOT NULL;

-- The claim query reads only rows that still need a dispatcher: this partial
-- index stays small however many finished rows wait for the cleaner.
CREATE INDEX IF NOT EXISTS outbox_due_idx ON outbox (due_at, id)
    WHERE status IN ('pending', 'publishing', 'published');
CREATE INDEX IF NOT EXISTS outbox_dead_idx ON outbox (id) WHERE status = 'dead';
CREATE INDEX IF NOT EXISTS outbox_finished_idx ON outbox (finished_at) WHERE status = 'done';

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

-- The version of each user's graph: every change to whom a user follows
-- takes the next one, in the transaction that makes the change (the row
-- lock orders a user's changes), also a change that finds nothing to do.
-- Redis applies the state PostgreSQL has with its version, so that a change
-- applied late — a request stalled between its commit and its Redis step,
-- an event handled after a newer one — is seen to be stale and changes
-- nothing (see feed/lua/follow.lua).
CREATE TABLE IF NOT EXISTS graph_versions (
    user_id bigint PRIMARY KEY,
    version bigint NOT NULL
);

-- Mutes and blocks: who hides whom in their home feed. A change takes the
-- next version of the graph of each user whose feed it changes.
CREATE TABLE IF NOT EXISTS mutes (
    user_id    bigint      NOT NULL CHECK (user_id > 0),
    muted_id   bigint      NOT NULL CHECK (muted_id > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, muted_id),
    CHECK (user_id <> muted_id)
);
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
