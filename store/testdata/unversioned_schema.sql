-- schema.sql as the unversioned `newsfeed migrate` (store/migrate.go before
-- migrations were numbered) applied it, verbatim: TestMigrateUpgradesAnUnversionedDatabase
-- builds a database with it and upgrades that in place. Never edit it.

-- newsfeed schema: the whole of it, for a new database and for every upgrade.
-- `newsfeed migrate` (and `newsfeed all`) apply it on every deploy, while the
-- service serves, through store.Migrate (store/migrate.go), which
--   * checks each statement against the catalog first and skips it when it is
--     already applied: a current schema changes nothing and locks no table;
--   * runs the rest in one transaction (all or nothing) under a short
--     lock_timeout, retried with backoff, so that it never stalls the queries
--     queued behind a lock it waits for;
--   * builds an index of a table that already existed with CREATE INDEX
--     CONCURRENTLY after that transaction (reads and writes go on), and builds
--     again an index that a failed concurrent build left INVALID;
--   * holds an advisory lock, so that two migrations run one after the other.
-- So every statement is one of the forms store.Migrate can check:
--   CREATE TABLE IF NOT EXISTS t / CREATE SEQUENCE IF NOT EXISTS s
--   ALTER TABLE t ADD COLUMN IF NOT EXISTS c ...   (one action per statement)
--   ALTER SEQUENCE s OWNED BY t.c
--   CREATE [UNIQUE] INDEX IF NOT EXISTS i ON t ...
-- Another form would run on every deploy (a test fails: a current schema must
-- run nothing). Each is idempotent by itself too, so `psql -f schema.sql` works.
-- An upgrade adds statements below the CREATE TABLE it changes (databases that
-- have the table never run its CREATE again); an added column must not
-- rewrite the table (no volatile default).

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
ALTER SEQUENCE posts_id_seq OWNED BY posts.id;

-- An author's own posts, newest first; also the per-followee probe of feed rebuilds.
CREATE INDEX IF NOT EXISTS posts_author_id_idx ON posts (author_id, id DESC) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS posts_idempotency_key_idx ON posts (author_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

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
-- Upgrades of databases created by earlier versions of this file.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS failures integer NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS ticket text;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS parent_id bigint;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS chunk_no integer;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS chunks_left integer;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS trace_context text;
-- When a row was parked dead (NULL for rows parked before this column).
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS died_at timestamptz;
ALTER TABLE follower_counts ADD COLUMN IF NOT EXISTS pulled boolean NOT NULL DEFAULT false;
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
