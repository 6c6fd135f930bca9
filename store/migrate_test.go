package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// Migrations run on every deploy while the service serves. These tests hold
// the locks that long queries hold and show that migrate neither waits for
// them nor stops posts and claims, and that what it must change it changes
// without stalling anyone (concurrent index builds, lock timeouts, retries).
// A migration of the tests' own (numbered 99901, after every real one)
// stands for the next schema change.

// TestMigrateACurrentSchemaLocksNoTable: on a database that has every
// migration, migrate changes nothing and completes whatever locks others
// hold on the tables.
func TestMigrateACurrentSchemaLocksNoTable(t *testing.T) {
	t.Parallel()

	t.Run("WhileALongTransactionHoldsOutboxRowsAndALongSelectRuns", func(t *testing.T) {
		t.Parallel()
		url := testenv.NewDatabaseURL(t)
		pool := testenv.Pool(t, url)
		db := store.New(pool, nil)
		ctx := t.Context()
		for i := range 3 {
			_, _, err := db.CreatePost(ctx, 1, fmt.Sprintf("seed %d", i), "")
			require.NoError(t, err)
		}
		// A long transaction that locked every outbox row (a batch job, an
		// operator's UPDATE left open): ROW SHARE on outbox, row locks.
		locker := migSession(t, url)
		migExec(t, locker, "BEGIN", "SELECT id FROM outbox FOR UPDATE")
		// A long plain query: ACCESS SHARE on outbox and posts.
		reader := migLongQuery(t, pool, url, "SELECT pg_sleep(600) FROM outbox, posts LIMIT 1")

		// What the unversioned migration ran first waits for them (and
		// every query on outbox would queue behind it).
		probe := migSession(t, url)
		migExec(t, probe, "SET lock_timeout = '100ms'")
		_, err := probe.Exec(ctx, "ALTER TABLE outbox ADD COLUMN IF NOT EXISTS ticket text")
		migRequirePgCode(t, err, pgerrcode.LockNotAvailable)

		// Posts and claims go on before, during and after the migration.
		migrated := make(chan struct{})
		var wg sync.WaitGroup
		var writeErr error
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-migrated:
					if n >= 20 {
						return
					}
				default:
				}
				if writeErr = migPostAndClaim(ctx, db); writeErr != nil {
					return
				}
			}
		})
		migCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		report, err := store.MigrateWith(migCtx, pool, store.MigrateOptions{})
		close(migrated)
		wg.Wait()
		require.NoError(t, err, "migrate waited for a lock: it must take none on a current schema")
		require.Empty(t, report.Applied, "a current schema runs nothing")
		require.Zero(t, report.Retries)
		require.NoError(t, writeErr, "posts and claims go on")

		// The long transaction and the long query are still there: migrate
		// did not outwait them.
		require.Equal(t, "idle in transaction", migState(t, pool, locker.PgConn().PID()))
		require.Equal(t, "active", migState(t, pool, reader))
		require.NoError(t, store.Migrate(migCtx, pool), "the default entry point too")
	})

	t.Run("WhileEveryTableIsLockedAccessExclusive", func(t *testing.T) {
		t.Parallel()
		url := testenv.NewDatabaseURL(t)
		pool := testenv.Pool(t, url)
		ctx := t.Context()
		locker := migSession(t, url)
		migExec(t, locker, "BEGIN", "LOCK TABLE "+migTables(t, pool)+" IN ACCESS EXCLUSIVE MODE")
		probe := migSession(t, url)
		migExec(t, probe, "SET lock_timeout = '100ms'")
		_, err := probe.Exec(ctx, "SELECT count(*) FROM outbox")
		migRequirePgCode(t, err, pgerrcode.LockNotAvailable) // even a read waits

		// ACCESS EXCLUSIVE conflicts with every lock, ACCESS SHARE included:
		// with no retries, any lock on a table would fail the migration
		// within 100 ms.
		migCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		report, err := store.MigrateWith(migCtx, pool, store.MigrateOptions{
			LockTimeout: 100 * time.Millisecond, IndexLockTimeout: 100 * time.Millisecond, RetryFor: -1,
		})
		require.NoError(t, err, "migrate took a lock on a table")
		require.Empty(t, report.Applied)
	})

	t.Run("LeavesThePoolsConnectionsAsTheyWere", func(t *testing.T) {
		t.Parallel()
		cfg, err := pgxpool.ParseConfig(testenv.NewDatabaseURL(t))
		require.NoError(t, err)
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
		require.NoError(t, err)
		defer pool.Close()
		report, err := store.MigrateWith(t.Context(), pool, store.MigrateOptions{
			Migrations: migFiles(t, map[string]string{"99901_table.sql": "-- +goose Up\nCREATE TABLE nf_extra (id int);\n"}),
		})
		require.NoError(t, err)
		require.Equal(t, []string{"99901_table.sql"}, report.Applied, "it ran one, on the pool's one connection")
		var timeout, zone string
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_setting('lock_timeout'), current_setting('TimeZone')").Scan(&timeout, &zone))
		require.Equal(t, "0", timeout, "the migration's lock_timeout stays with the migration")
		var serverZone string
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT reset_val FROM pg_settings WHERE name = 'TimeZone'").Scan(&serverZone))
		require.Equal(t, serverZone, zone, "and so does its time zone")
		var locks int
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&locks))
		require.Zero(t, locks, "and its advisory lock")
	})
}

// TestMigrateUpgradesAnUnversionedDatabase: a database that the unversioned
// migrate made (today's schema, or an older one, and no goose table) is
// brought to the latest version in place, its data intact.
func TestMigrateUpgradesAnUnversionedDatabase(t *testing.T) {
	t.Parallel()

	t.Run("OfTheLastSchemaWithItsDataAndLockingNoTable", func(t *testing.T) {
		t.Parallel()
		url := migUnversionedDatabase(t)
		pool := testenv.Pool(t, url)
		db := store.New(pool, nil)
		ctx := t.Context()
		first, _, err := db.CreatePost(ctx, 1, "before versions", "key-1")
		require.NoError(t, err)
		// A follow as the version before wrote it (it knew no graph versions).
		_, err = pool.Exec(ctx, `
WITH f AS (INSERT INTO follows (follower_id, followee_id) VALUES (2, 1) RETURNING follower_id, followee_id),
     c AS (INSERT INTO follower_counts (user_id, followers) SELECT followee_id, 1 FROM f)
INSERT INTO outbox (event_type, payload) SELECT 'follow.created', jsonb_build_object('follower_id', follower_id, 'followee_id', followee_id) FROM f`)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "UPDATE outbox SET ticket = '1-0', trace_context = 'tp' WHERE id = (SELECT min(id) FROM outbox)")
		require.NoError(t, err)
		outboxBefore := migRows(t, pool, "SELECT to_jsonb(o) FROM outbox o ORDER BY id")

		// Version 1 finds everything in place: with every table locked
		// ACCESS EXCLUSIVE and no retries, it still records itself.
		locker := migSession(t, url)
		migExec(t, locker, "BEGIN", "LOCK TABLE "+migTables(t, pool)+" IN ACCESS EXCLUSIVE MODE")
		migCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		report, err := store.MigrateWith(migCtx, pool, store.MigrateOptions{
			LockTimeout: 100 * time.Millisecond, IndexLockTimeout: 100 * time.Millisecond, RetryFor: -1,
			Migrations: migFilesUpTo(t, 1),
		})
		require.NoError(t, err, "version 1 took a lock on a table of a current database")
		require.Equal(t, []string{"00001_initial.sql"}, report.Applied)
		require.Zero(t, report.Retries)
		migExec(t, locker, "COMMIT")

		// Then up to the latest, as `newsfeed migrate` does.
		report, err = store.MigrateWith(migCtx, pool, store.MigrateOptions{})
		require.NoError(t, err)
		require.Equal(t, migNames(t), append([]string{"00001_initial.sql"}, report.Applied...), "and the rest")
		require.Equal(t, migVersions(t), migApplied(t, pool))

		fresh := testenv.NewPool(t)
		require.Equal(t, migCatalog(t, fresh), migCatalog(t, pool))
		require.Equal(t, migColumnOrder(t, fresh), migColumnOrder(t, pool))
		// The data is intact, and the id sequence goes on.
		got, err := db.Post(ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, "before versions", got.Body)
		followers, err := db.FollowerCount(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, int64(1), followers)
		require.Equal(t, outboxBefore, migRows(t, pool, "SELECT to_jsonb(o) FROM outbox o ORDER BY id"))
		// A follow made before graph versions is at version 0, and the
		// next change of that graph takes version 1.
		st, err := db.FollowState(ctx, 2, 1)
		require.NoError(t, err)
		require.Equal(t, domain.EdgeState{Follower: 2, Followee: 1, Following: true, Version: 0, Followees: 1}, st)
		ch, err := db.Unfollow(ctx, 2, 1)
		require.NoError(t, err)
		require.Equal(t, domain.EdgeChange{EdgeState: domain.EdgeState{Follower: 2, Followee: 1, Version: 1}, Changed: true}, ch)
		again, created, err := db.CreatePost(ctx, 1, "before versions", "key-1")
		require.NoError(t, err)
		require.False(t, created, "the idempotency key's index holds")
		require.Equal(t, first.ID, again.ID)
		second, _, err := db.CreatePost(ctx, 1, "after versions", "")
		require.NoError(t, err)
		require.Greater(t, second.ID, first.ID)
	})

	t.Run("OfAnOlderSchema", func(t *testing.T) {
		t.Parallel()
		pool := testenv.Pool(t, migUnversionedDatabase(t))
		ctx := t.Context()
		// What earlier versions of schema.sql lacked.
		migExecPool(t, pool,
			"DROP TABLE pulled_posts",
			"ALTER TABLE outbox DROP COLUMN failures, DROP COLUMN chunks_left, DROP COLUMN trace_context",
			"ALTER TABLE follower_counts DROP COLUMN pulled",
			"DROP INDEX follows_following_idx",
			"DROP INDEX outbox_chunk_idx",
			"ALTER SEQUENCE posts_id_seq OWNED BY NONE")
		fresh := testenv.NewPool(t)
		require.NotEqual(t, migCatalog(t, fresh), migCatalog(t, pool))

		report, err := store.MigrateWith(ctx, pool, store.MigrateOptions{})
		require.NoError(t, err)
		require.Equal(t, migNames(t), report.Applied)
		require.Equal(t, migCatalog(t, fresh), migCatalog(t, pool))

		report, err = store.MigrateWith(ctx, pool, store.MigrateOptions{})
		require.NoError(t, err)
		require.Empty(t, report.Applied)
	})
}

// TestMigrationsProduceSchemaSQL: schema.sql, the schema to read, is exactly
// what the migrations make of an empty database.
func TestMigrationsProduceSchemaSQL(t *testing.T) {
	t.Parallel()
	schema, err := os.ReadFile(filepath.Join("..", "schema.sql"))
	require.NoError(t, err)
	fromSchema := testenv.Pool(t, newEmptyDatabase(t))
	_, err = fromSchema.Exec(t.Context(), string(schema))
	require.NoError(t, err)
	migrated := testenv.Pool(t, newEmptyDatabase(t))
	require.NoError(t, store.Migrate(t.Context(), migrated))

	want, got := migCatalog(t, fromSchema), migCatalog(t, migrated)
	require.Contains(t, want, "column outbox.died_at timestamp with time zone not null f default  identity  generated  collation 0")
	require.Equal(t, want, got, "schema.sql and the migrations disagree: change schema.sql as the new migration changes the schema")
	require.Equal(t, migColumnOrder(t, fromSchema), migColumnOrder(t, migrated),
		"a column that a migration adds comes last in schema.sql's CREATE TABLE too")
}

// TestMigrationFilesAreNumbered: every file is NNNNN_name.sql and the
// versions run 1, 2, 3… (goose ignores a file of another name, and its
// `create` numbers by timestamp unless told -s).
func TestMigrationFilesAreNumbered(t *testing.T) {
	t.Parallel()
	entries, err := fs.ReadDir(store.Migrations(), ".")
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	name := regexp.MustCompile(`^(\d{5})_[a-z0-9_]+\.sql$`)
	for i, e := range entries {
		m := name.FindStringSubmatch(e.Name())
		require.NotNil(t, m, "%s: name it NNNNN_what_it_does.sql", e.Name())
		v, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		require.Equal(t, i+1, v, "%s: the next number after %d", e.Name(), i)
	}
}

// TestMigrationStatus: each migration, applied and when, or pending; asking
// changes nothing.
func TestMigrationStatus(t *testing.T) {
	t.Parallel()
	url := newEmptyDatabase(t)
	pool := testenv.Pool(t, url)
	ctx := t.Context()
	states, err := store.MigrationStatus(ctx, pool)
	require.NoError(t, err)
	require.Len(t, states, len(migNames(t)))
	for i, s := range states {
		require.Equal(t, store.MigrationState{Version: int64(i + 1), Name: migNames(t)[i]}, s)
	}
	require.Empty(t, migTables(t, pool), "status created nothing")

	// When is when in UTC, whatever the time zone of the database.
	dbName := pool.Config().ConnConfig.Database
	migExecPool(t, pool, "ALTER DATABASE "+dbName+" SET TimeZone = 'Pacific/Kiritimati'") // UTC+14
	pool = testenv.Pool(t, url)
	before := time.Now()
	require.NoError(t, store.Migrate(ctx, pool))
	states, err = store.MigrationStatus(ctx, pool)
	require.NoError(t, err)
	require.Len(t, states, len(migNames(t)))
	for _, s := range states {
		require.True(t, s.Applied, s.Name)
		require.Equal(t, time.UTC, s.AppliedAt.Location())
		require.WithinRange(t, s.AppliedAt, before.Add(-2*time.Second), time.Now().Add(2*time.Second), s.Name)
	}
}

// TestMigrateBuildsNewIndexesConcurrently: a NO TRANSACTION migration builds
// its indexes CONCURRENTLY, and posts and claims go on while it does.
func TestMigrateBuildsNewIndexesConcurrently(t *testing.T) {
	t.Parallel()
	url := testenv.NewDatabaseURL(t)
	pool := testenv.Pool(t, url)
	db := store.New(pool, nil)
	ctx := t.Context()
	migExecPool(t, pool, "DROP INDEX posts_author_id_idx", "DROP INDEX outbox_due_idx")
	files := migFiles(t, map[string]string{"99901_indexes.sql": `-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS posts_author_id_idx ON posts (author_id, id DESC) WHERE deleted_at IS NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_due_idx ON outbox (due_at, id)
    WHERE status IN ('pending', 'publishing', 'published');
`})

	// A writer whose transaction stays open. A concurrent build waits for it
	// and lets everyone else by; a plain CREATE INDEX would queue a SHARE
	// lock behind it that every later write would wait for.
	writer := migSession(t, url)
	migExec(t, writer, "BEGIN",
		"INSERT INTO posts (author_id, body) VALUES (3, 'open')",
		`INSERT INTO outbox (event_type, payload) VALUES ('post.created', '{"post_id": 0, "author_id": 3}')`)

	type result struct {
		report store.MigrateReport
		err    error
	}
	migCtx, cancel := context.WithTimeout(ctx, time.Minute)
	done := make(chan result, 1)
	go func() {
		r, err := store.MigrateWith(migCtx, pool, store.MigrateOptions{Migrations: files})
		done <- result{r, err}
	}()
	var finished *result
	t.Cleanup(func() { // before the writer's session closes
		cancel()
		if finished == nil {
			<-done
		}
	})
	migWaitFor(t, pool, `
SELECT EXISTS (SELECT 1 FROM pg_stat_progress_create_index
               WHERE datname = current_database() AND command = 'CREATE INDEX CONCURRENTLY')`)
	for range 5 {
		require.NoError(t, migPostAndClaim(ctx, db), "posts and claims go on during the build")
	}
	select {
	case r := <-done:
		finished = &r
		t.Fatalf("migrate finished while a writer it must wait for was open: %v", r.err)
	default:
	}
	migExec(t, writer, "COMMIT")
	select {
	case r := <-done:
		finished = &r
	case <-migCtx.Done():
		t.Fatal("migrate did not finish after the writer committed")
	}
	require.NoError(t, finished.err)
	require.Equal(t, []string{"99901_indexes.sql"}, finished.report.Applied)
	require.Equal(t, migIndexValid, migIndexState(t, pool, "posts_author_id_idx"))
	require.Equal(t, migIndexValid, migIndexState(t, pool, "outbox_due_idx"))
}

// TestMigrateRebuildsAnInvalidIndex: a concurrent build that failed leaves an
// INVALID index (kept up to date, never used), which CREATE INDEX IF NOT
// EXISTS takes for done; migrate drops it first, and the migration that
// names it builds it again.
func TestMigrateRebuildsAnInvalidIndex(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t)
	ctx := t.Context()
	const build = "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS outbox_chunk_idx ON outbox (parent_id, chunk_no) WHERE parent_id IS NOT NULL"
	files := migFiles(t, map[string]string{"99901_chunk_index.sql": "-- +goose NO TRANSACTION\n-- +goose Up\n" + build + ";\n"})
	// Two chunks with one number: the unique build fails.
	migExecPool(t, pool, "DROP INDEX outbox_chunk_idx", `
INSERT INTO outbox (event_type, payload, parent_id, chunk_no)
VALUES ('fanout.chunk', '{}', 1, 1), ('fanout.chunk', '{}', 1, 1)`)
	_, err := pool.Exec(ctx,
		"CREATE UNIQUE INDEX CONCURRENTLY outbox_chunk_idx ON outbox (parent_id, chunk_no) WHERE parent_id IS NOT NULL")
	migRequirePgCode(t, err, pgerrcode.UniqueViolation)
	require.Equal(t, migIndexInvalid, migIndexState(t, pool, "outbox_chunk_idx"))

	// While the duplicate is there, migrate fails at once, naming the file,
	// the statement and the cause: only lock timeouts are retried.
	report, err := store.MigrateWith(ctx, pool, store.MigrateOptions{Migrations: files})
	require.ErrorContains(t, err, "migrate: 99901_chunk_index.sql: "+build)
	migRequirePgCode(t, err, pgerrcode.UniqueViolation)
	require.NotContains(t, err.Error(), "gave up")
	require.Zero(t, report.Retries)
	require.Equal(t, []string{"outbox_chunk_idx"}, report.Dropped, "it was dropped, to be built again")
	require.Empty(t, report.Applied)
	require.Equal(t, migIndexInvalid, migIndexState(t, pool, "outbox_chunk_idx"), "the build failed again")

	migExecPool(t, pool, "DELETE FROM outbox WHERE id = (SELECT max(id) FROM outbox)")
	report, err = store.MigrateWith(ctx, pool, store.MigrateOptions{Migrations: files})
	require.NoError(t, err)
	require.Equal(t, []string{"outbox_chunk_idx"}, report.Dropped)
	require.Equal(t, []string{"99901_chunk_index.sql"}, report.Applied)
	require.Equal(t, migIndexValid, migIndexState(t, pool, "outbox_chunk_idx"))
	_, err = pool.Exec(ctx, "INSERT INTO outbox (event_type, payload, parent_id, chunk_no) VALUES ('fanout.chunk', '{}', 1, 1)")
	migRequirePgCode(t, err, pgerrcode.UniqueViolation) // the index is in use
}

// TestMigrateGivesUpOnALockHeldTooLong: a lock that is not granted within the
// lock_timeout is tried again with backoff, then migrate fails naming the
// file and the statement, having changed nothing and holding nothing.
func TestMigrateGivesUpOnALockHeldTooLong(t *testing.T) {
	t.Parallel()
	short := store.MigrateOptions{
		LockTimeout: 100 * time.Millisecond, IndexLockTimeout: 100 * time.Millisecond, RetryFor: 700 * time.Millisecond,
	}

	t.Run("AColumnToAdd", func(t *testing.T) {
		t.Parallel()
		url := testenv.NewDatabaseURL(t)
		pool := testenv.Pool(t, url)
		db := store.New(pool, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, _, err := db.CreatePost(ctx, 1, "seed", "")
		require.NoError(t, err)
		opts := short
		opts.Migrations = migFiles(t, map[string]string{"99901_column.sql": `-- +goose Up
CREATE TABLE nf_first (id int);
ALTER TABLE outbox ADD COLUMN nf_extra integer;
`})
		locker := migSession(t, url)
		migExec(t, locker, "BEGIN", "SELECT id FROM outbox FOR UPDATE")

		report, err := store.MigrateWith(ctx, pool, opts)
		require.ErrorContains(t, err, "migrate: 99901_column.sql: ")
		require.ErrorContains(t, err, "ALTER TABLE outbox ADD COLUMN nf_extra integer;: lock not granted within lock_timeout 100ms")
		require.ErrorContains(t, err, "gave up after")
		migRequirePgCode(t, err, pgerrcode.LockNotAvailable)
		require.Positive(t, report.Retries, "it tried again")
		require.Empty(t, report.Applied)
		require.False(t, migColumnExists(t, pool, "outbox", "nf_extra"), "nothing half done")
		require.False(t, migTableExists(t, pool, "nf_first"), "nothing half done")
		require.NotContains(t, migApplied(t, pool), int64(99901))
		// It holds nothing: posts and claims go on.
		require.NoError(t, migPostAndClaim(ctx, db))

		migExec(t, locker, "COMMIT")
		report, err = store.MigrateWith(ctx, pool, opts)
		require.NoError(t, err)
		require.Equal(t, []string{"99901_column.sql"}, report.Applied)
		require.True(t, migColumnExists(t, pool, "outbox", "nf_extra"))
	})

	t.Run("AnIndexToBuild", func(t *testing.T) {
		t.Parallel()
		url := testenv.NewDatabaseURL(t)
		pool := testenv.Pool(t, url)
		db := store.New(pool, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		opts := short
		opts.Migrations = migFiles(t, map[string]string{"99901_index.sql": `-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_due_idx ON outbox (due_at, id)
    WHERE status IN ('pending', 'publishing', 'published');
`})
		migExecPool(t, pool, "DROP INDEX outbox_due_idx")
		writer := migSession(t, url)
		migExec(t, writer, "BEGIN", `INSERT INTO outbox (event_type, payload) VALUES ('post.created', '{"post_id": 0, "author_id": 3}')`)

		report, err := store.MigrateWith(ctx, pool, opts)
		require.ErrorContains(t, err, "migrate: 99901_index.sql: ")
		// The build, or the drop of what an earlier attempt left, before it.
		require.ErrorContains(t, err, "INDEX CONCURRENTLY")
		require.ErrorContains(t, err, "outbox_due_idx")
		require.ErrorContains(t, err, "lock not granted within lock_timeout 100ms")
		require.ErrorContains(t, err, "gave up after")
		migRequirePgCode(t, err, pgerrcode.LockNotAvailable)
		require.Positive(t, report.Retries)
		require.Empty(t, report.Applied)
		// The build registered the index before it waited: it is left INVALID.
		require.Equal(t, migIndexInvalid, migIndexState(t, pool, "outbox_due_idx"))
		require.NoError(t, migPostAndClaim(ctx, db))

		migExec(t, writer, "COMMIT")
		report, err = store.MigrateWith(ctx, pool, opts)
		require.NoError(t, err)
		require.Equal(t, []string{"outbox_due_idx"}, report.Dropped)
		require.Equal(t, []string{"99901_index.sql"}, report.Applied)
		require.Equal(t, migIndexValid, migIndexState(t, pool, "outbox_due_idx"))
	})
}

// migUnversionedDatabase creates a database as the unversioned migrate left
// it: the last schema.sql it applied (testdata), no goose table.
func migUnversionedDatabase(t *testing.T) string {
	t.Helper()
	schema, err := os.ReadFile(filepath.Join("testdata", "unversioned_schema.sql"))
	require.NoError(t, err)
	url := newEmptyDatabase(t)
	pool := testenv.Pool(t, url)
	_, err = pool.Exec(t.Context(), string(schema))
	require.NoError(t, err)
	return url
}

// migFiles returns the migration files with the test's own beside them
// (name → text).
func migFiles(t *testing.T, extra map[string]string) fs.FS {
	t.Helper()
	files := fstest.MapFS{}
	for _, name := range migNames(t) {
		b, err := fs.ReadFile(store.Migrations(), name)
		require.NoError(t, err)
		files[name] = &fstest.MapFile{Data: b}
	}
	for name, text := range extra {
		files[name] = &fstest.MapFile{Data: []byte(text)}
	}
	return files
}

// migFilesUpTo returns the migration files up to version v.
func migFilesUpTo(t *testing.T, v int) fs.FS {
	t.Helper()
	files := migFiles(t, nil).(fstest.MapFS)
	for name := range files {
		if n, _ := strconv.Atoi(name[:5]); n > v {
			delete(files, name)
		}
	}
	return files
}

// migNames lists the migration files, in order.
func migNames(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(store.Migrations(), "*.sql")
	require.NoError(t, err)
	slices.Sort(names)
	return names
}

// migVersions lists the migrations' versions, in order.
func migVersions(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	for _, name := range migNames(t) {
		v, err := strconv.ParseInt(name[:5], 10, 64)
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// migApplied lists the versions goose recorded as applied, in order.
func migApplied(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	return migRowsOf[int64](t, pool, "SELECT version_id FROM goose_db_version WHERE is_applied AND version_id > 0 ORDER BY 1")
}

// migTables lists the tables of the public schema but goose's own, quoted
// and separated by commas.
func migTables(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var tables string
	require.NoError(t, pool.QueryRow(t.Context(), `
SELECT coalesce(string_agg(quote_ident(relname), ', ' ORDER BY relname), '') FROM pg_class
WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' AND relname <> 'goose_db_version'`).Scan(&tables))
	return tables
}

func migRows(t *testing.T, pool *pgxpool.Pool, sql string) []string {
	t.Helper()
	return migRowsOf[string](t, pool, sql)
}

func migRowsOf[T any](t *testing.T, pool *pgxpool.Pool, sql string) []T {
	t.Helper()
	rows, err := pool.Query(t.Context(), sql)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[T])
	require.NoError(t, err)
	return out
}

func migTableExists(t *testing.T, pool *pgxpool.Pool, table string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok))
	return ok
}

// migColumnOrder lists each table's columns in their order.
func migColumnOrder(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	return migRows(t, pool, `
SELECT c.relname || ': ' || string_agg(a.attname, ', ' ORDER BY a.attnum)
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname !~ '^goose_db_version'
  AND a.attnum > 0 AND NOT a.attisdropped
GROUP BY c.relname ORDER BY 1`)
}

// migPostAndClaim creates a post and claims its outbox row, each within a few
// seconds. Rows that others locked are skipped, and earlier calls' rows are
// leased, so the claim finds exactly the new row.
func migPostAndClaim(ctx context.Context, db *store.DB) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, _, err := db.CreatePost(ctx, 2, "during a migration", "")
	if err != nil {
		return err
	}
	events, err := db.Claim(ctx, 10, time.Hour)
	if err != nil {
		return err
	}
	if len(events) != 1 {
		return fmt.Errorf("claimed %d rows, want the new post's", len(events))
	}
	var payload struct {
		PostID int64 `json:"post_id"`
	}
	if err := json.Unmarshal(events[0].Payload, &payload); err != nil || payload.PostID != p.ID {
		return fmt.Errorf("claimed %s, want post %d (%v)", events[0].Payload, p.ID, err)
	}
	return nil
}

// migSession opens a session of its own on url; closing it at the end of the
// test ends its transaction.
func migSession(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func migExec(t *testing.T, conn *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		_, err := conn.Exec(t.Context(), sql)
		require.NoError(t, err, sql)
	}
}

func migExecPool(t *testing.T, pool *pgxpool.Pool, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		_, err := pool.Exec(t.Context(), sql)
		require.NoError(t, err, sql)
	}
}

// migLongQuery runs sql on a session of its own until the test ends, and
// returns the session's pid once the query is sleeping, its locks taken.
func migLongQuery(t *testing.T, pool *pgxpool.Pool, url, sql string) uint32 {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	pid := conn.PgConn().PID()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = conn.Exec(ctx, sql)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = conn.Close(context.Background())
	})
	migWaitFor(t, pool, `
SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND wait_event = 'PgSleep')`, pid)
	return pid
}

// migWaitFor polls a boolean query until it is true, for at most 30 s.
func migWaitFor(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&ok))
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("still false after 30 s: %s", sql)
		case <-tick.C:
		}
	}
}

func migState(t *testing.T, pool *pgxpool.Pool, pid uint32) string {
	t.Helper()
	var state string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT state FROM pg_stat_activity WHERE pid = $1", pid).Scan(&state))
	return state
}

const (
	migIndexMissing = "missing"
	migIndexValid   = "valid"
	migIndexInvalid = "INVALID"
)

func migIndexState(t *testing.T, pool *pgxpool.Pool, name string) string {
	t.Helper()
	var valid *bool
	err := pool.QueryRow(t.Context(), "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", name).Scan(&valid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return migIndexMissing
	case err != nil:
		require.NoError(t, err)
	case *valid:
		return migIndexValid
	}
	return migIndexInvalid
}

func migColumnExists(t *testing.T, pool *pgxpool.Pool, table, column string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(t.Context(),
		"SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = $1 AND column_name = $2)",
		table, column).Scan(&ok))
	return ok
}

// migCatalog describes the public schema but goose's own table: relations,
// columns, constraints, indexes (with their validity), sequences with their
// owners, views, functions, triggers, types, policies and comments, sorted,
// so that column order (a dropped and re-added column comes last) does not
// count: migColumnOrder compares it.
func migCatalog(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	return migRows(t, pool, `
WITH rel AS (
    SELECT * FROM pg_class
    WHERE relnamespace = 'public'::regnamespace AND relname !~ '^goose_db_version'
)
SELECT format('relation %s kind %s persistence %s options %s row security %s %s acl %s',
              relname, relkind, relpersistence, reloptions, relrowsecurity, relforcerowsecurity, relacl)
FROM rel
UNION ALL
SELECT format('column %s.%s %s not null %s default %s identity %s generated %s collation %s',
              c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
              pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, a.attcollation)
FROM pg_attribute a JOIN rel c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
FROM pg_constraint
WHERE connamespace = 'public'::regnamespace AND conrelid::regclass::text !~ '^goose_db_version'
UNION ALL
SELECT format('index %s valid %s', pg_get_indexdef(i.indexrelid), i.indisvalid)
FROM pg_index i JOIN rel c ON c.oid = i.indexrelid
UNION ALL
SELECT format('sequence %s %s start %s min %s max %s increment %s cycle %s cache %s owned by %s',
              s.sequencename, s.data_type, s.start_value, s.min_value, s.max_value, s.increment_by, s.cycle, s.cache_size,
              (SELECT string_agg(pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), ', ')
               FROM pg_depend d
               WHERE d.classid = 'pg_class'::regclass AND d.objid = to_regclass(s.sequencename) AND d.deptype IN ('a', 'i')))
FROM pg_sequences s WHERE s.schemaname = 'public' AND s.sequencename !~ '^goose_db_version'
UNION ALL
SELECT format('view %s %s', relname, pg_get_viewdef(oid)) FROM rel WHERE relkind IN ('v', 'm')
UNION ALL
SELECT format('function %s', pg_get_functiondef(oid))
FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND prokind IN ('f', 'p')
UNION ALL
SELECT format('trigger %s', pg_get_triggerdef(tg.oid))
FROM pg_trigger tg JOIN rel c ON c.oid = tg.tgrelid WHERE NOT tg.tgisinternal
UNION ALL
SELECT format('type %s %s %s %s', typname, typtype, format_type(typbasetype, typtypmod),
              (SELECT string_agg(enumlabel, ', ' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = ty.oid))
FROM pg_type ty WHERE typnamespace = 'public'::regnamespace AND typtype IN ('e', 'd', 'r')
UNION ALL
SELECT format('policy %s %s %s %s', polrelid::regclass, polname, pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid))
FROM pg_policy p JOIN rel c ON c.oid = p.polrelid
UNION ALL
SELECT format('comment %s %s', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description)
FROM pg_description d JOIN rel c ON d.classoid = 'pg_class'::regclass AND d.objoid = c.oid
UNION ALL
SELECT format('extension %s', extname) FROM pg_extension
ORDER BY 1`)
}

func migRequirePgCode(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, code, pgErr.Code, "%v", err)
}
