package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// Migrations run on every deploy while the service serves. These tests hold
// the locks that long queries hold and show that migrate neither waits for
// them nor stops posts and claims, and that what it must change it changes
// without stalling anyone (concurrent index builds, lock timeouts, retries).

// TestMigrateACurrentSchemaLocksNoTable: on a current schema migrate changes
// nothing and completes whatever locks others hold on the tables.
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

		// What the old migration ran first waits for them (and every query
		// on outbox would queue behind it).
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
		report, err := store.MigrateWith(migCtx, pool, testenv.Schema(t), store.MigrateOptions{})
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
		require.NoError(t, store.Migrate(migCtx, pool, testenv.Schema(t)), "the default entry point too")
	})

	t.Run("WhileEveryTableIsLockedAccessExclusive", func(t *testing.T) {
		t.Parallel()
		url := testenv.NewDatabaseURL(t)
		pool := testenv.Pool(t, url)
		ctx := t.Context()
		var tables string
		require.NoError(t, pool.QueryRow(ctx, `
SELECT string_agg(quote_ident(relname), ', ') FROM pg_class
WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'`).Scan(&tables))
		require.Contains(t, tables, "outbox")
		locker := migSession(t, url)
		migExec(t, locker, "BEGIN", "LOCK TABLE "+tables+" IN ACCESS EXCLUSIVE MODE")
		probe := migSession(t, url)
		migExec(t, probe, "SET lock_timeout = '100ms'")
		_, err := probe.Exec(ctx, "SELECT count(*) FROM outbox")
		migRequirePgCode(t, err, pgerrcode.LockNotAvailable) // even a read waits

		// ACCESS EXCLUSIVE conflicts with every lock, ACCESS SHARE included:
		// with no retries, any lock on a table would fail the migration
		// within 100 ms.
		migCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		report, err := store.MigrateWith(migCtx, pool, testenv.Schema(t), store.MigrateOptions{
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
		require.NoError(t, store.Migrate(t.Context(), pool, testenv.Schema(t)))
		var timeout string
		require.NoError(t, pool.QueryRow(t.Context(), "SHOW lock_timeout").Scan(&timeout))
		require.Equal(t, "0", timeout, "the migration's lock_timeout stays with the migration")
	})
}

// TestMigrateBuildsNewIndexesConcurrently: an index that an older schema
// lacks is built CONCURRENTLY, and posts and claims go on while it is.
func TestMigrateBuildsNewIndexesConcurrently(t *testing.T) {
	t.Parallel()
	url := testenv.NewDatabaseURL(t)
	pool := testenv.Pool(t, url)
	db := store.New(pool, nil)
	ctx := t.Context()
	migExecPool(t, pool, "DROP INDEX posts_author_id_idx", "DROP INDEX outbox_due_idx")

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
		r, err := store.MigrateWith(migCtx, pool, testenv.Schema(t), store.MigrateOptions{})
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
	migRequireApplied(t, finished.report.Applied,
		"CREATE INDEX CONCURRENTLY IF NOT EXISTS posts_author_id_idx ON posts (author_id, id DESC)",
		"CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_due_idx ON outbox (due_at, id)")
	require.Equal(t, migIndexValid, migIndexState(t, pool, "posts_author_id_idx"))
	require.Equal(t, migIndexValid, migIndexState(t, pool, "outbox_due_idx"))
}

// TestMigrateUpgradesAnOlderSchema: a database that an earlier schema made
// comes out as a new one, and the next migration runs nothing.
func TestMigrateUpgradesAnOlderSchema(t *testing.T) {
	t.Parallel()
	fresh := testenv.NewPool(t)
	pool := testenv.NewPool(t)
	ctx := t.Context()
	migExecPool(t, pool,
		"DROP TABLE pulled_posts",
		"ALTER TABLE outbox DROP COLUMN failures, DROP COLUMN chunks_left, DROP COLUMN trace_context",
		"ALTER TABLE follower_counts DROP COLUMN pulled",
		"DROP INDEX follows_following_idx",
		"DROP INDEX outbox_chunk_idx",
		"ALTER SEQUENCE posts_id_seq OWNED BY NONE")
	require.NotEqual(t, migCatalog(t, fresh), migCatalog(t, pool))

	report, err := store.MigrateWith(ctx, pool, testenv.Schema(t), store.MigrateOptions{})
	require.NoError(t, err)
	migRequireApplied(t, report.Applied,
		"ALTER SEQUENCE posts_id_seq OWNED BY posts.id",
		"ALTER TABLE outbox ADD COLUMN IF NOT EXISTS failures integer NOT NULL DEFAULT 0",
		"ALTER TABLE outbox ADD COLUMN IF NOT EXISTS chunks_left integer",
		"ALTER TABLE outbox ADD COLUMN IF NOT EXISTS trace_context text",
		"ALTER TABLE follower_counts ADD COLUMN IF NOT EXISTS pulled boolean NOT NULL DEFAULT false",
		"CREATE TABLE IF NOT EXISTS pulled_posts (",
		// Indexes of existing tables come after the transaction, concurrently.
		"CREATE INDEX CONCURRENTLY IF NOT EXISTS follows_following_idx ON follows",
		"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS outbox_chunk_idx ON outbox")
	require.Equal(t, migCatalog(t, fresh), migCatalog(t, pool))

	report, err = store.MigrateWith(ctx, pool, testenv.Schema(t), store.MigrateOptions{})
	require.NoError(t, err)
	require.Empty(t, report.Applied)
}

// TestMigrateRebuildsAnInvalidIndex: a concurrent build that failed leaves an
// INVALID index (kept up to date, never used); migrate drops and rebuilds it.
func TestMigrateRebuildsAnInvalidIndex(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t)
	ctx := t.Context()
	// Two chunks with one number: the unique build fails.
	migExecPool(t, pool, "DROP INDEX outbox_chunk_idx", `
INSERT INTO outbox (event_type, payload, parent_id, chunk_no)
VALUES ('fanout.chunk', '{}', 1, 1), ('fanout.chunk', '{}', 1, 1)`)
	_, err := pool.Exec(ctx,
		"CREATE UNIQUE INDEX CONCURRENTLY outbox_chunk_idx ON outbox (parent_id, chunk_no) WHERE parent_id IS NOT NULL")
	migRequirePgCode(t, err, pgerrcode.UniqueViolation)
	require.Equal(t, migIndexInvalid, migIndexState(t, pool, "outbox_chunk_idx"))

	// While the duplicate is there, migrate fails at once, naming the
	// statement and the cause: only lock timeouts are retried.
	report, err := store.MigrateWith(ctx, pool, testenv.Schema(t), store.MigrateOptions{})
	require.ErrorContains(t, err, "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS outbox_chunk_idx ON outbox")
	migRequirePgCode(t, err, pgerrcode.UniqueViolation)
	require.NotContains(t, err.Error(), "gave up")
	require.Zero(t, report.Retries)

	migExecPool(t, pool, "DELETE FROM outbox WHERE id = (SELECT max(id) FROM outbox)")
	report, err = store.MigrateWith(ctx, pool, testenv.Schema(t), store.MigrateOptions{})
	require.NoError(t, err)
	migRequireApplied(t, report.Applied,
		"DROP INDEX CONCURRENTLY IF EXISTS outbox_chunk_idx",
		"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS outbox_chunk_idx ON outbox (parent_id, chunk_no) WHERE parent_id IS NOT NULL")
	require.Equal(t, migIndexValid, migIndexState(t, pool, "outbox_chunk_idx"))
	_, err = pool.Exec(ctx, "INSERT INTO outbox (event_type, payload, parent_id, chunk_no) VALUES ('fanout.chunk', '{}', 1, 1)")
	migRequirePgCode(t, err, pgerrcode.UniqueViolation) // the index is in use
}

// TestMigrateGivesUpOnALockHeldTooLong: a lock that is not granted within the
// lock_timeout is tried again with backoff, then migrate fails naming the
// statement, having changed nothing and holding nothing.
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
		migExecPool(t, pool, "ALTER TABLE outbox DROP COLUMN chunks_left")
		locker := migSession(t, url)
		migExec(t, locker, "BEGIN", "SELECT id FROM outbox FOR UPDATE")

		report, err := store.MigrateWith(ctx, pool, testenv.Schema(t), short)
		require.ErrorContains(t, err, "migrate: ")
		require.ErrorContains(t, err, "ALTER TABLE outbox ADD COLUMN IF NOT EXISTS chunks_left integer")
		require.ErrorContains(t, err, "lock_timeout 100ms")
		require.ErrorContains(t, err, "gave up after")
		migRequirePgCode(t, err, pgerrcode.LockNotAvailable)
		require.Positive(t, report.Retries, "it tried again")
		require.Empty(t, report.Applied)
		require.False(t, migColumnExists(t, pool, "outbox", "chunks_left"), "nothing half done")
		// It holds nothing: posts and claims go on.
		require.NoError(t, migPostAndClaim(ctx, db))

		migExec(t, locker, "COMMIT")
		report, err = store.MigrateWith(ctx, pool, testenv.Schema(t), short)
		require.NoError(t, err)
		migRequireApplied(t, report.Applied, "ALTER TABLE outbox ADD COLUMN IF NOT EXISTS chunks_left integer")
	})

	t.Run("AnIndexToBuild", func(t *testing.T) {
		t.Parallel()
		url := testenv.NewDatabaseURL(t)
		pool := testenv.Pool(t, url)
		db := store.New(pool, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		migExecPool(t, pool, "DROP INDEX outbox_due_idx")
		writer := migSession(t, url)
		migExec(t, writer, "BEGIN", `INSERT INTO outbox (event_type, payload) VALUES ('post.created', '{"post_id": 0, "author_id": 3}')`)

		report, err := store.MigrateWith(ctx, pool, testenv.Schema(t), short)
		require.ErrorContains(t, err, "migrate: ")
		require.ErrorContains(t, err, "INDEX CONCURRENTLY")
		require.ErrorContains(t, err, "outbox_due_idx")
		require.ErrorContains(t, err, "gave up after")
		migRequirePgCode(t, err, pgerrcode.LockNotAvailable)
		require.Positive(t, report.Retries)
		// The build registered the index before it waited: it is left INVALID.
		require.Equal(t, migIndexInvalid, migIndexState(t, pool, "outbox_due_idx"))
		require.NoError(t, migPostAndClaim(ctx, db))

		migExec(t, writer, "COMMIT")
		report, err = store.MigrateWith(ctx, pool, testenv.Schema(t), short)
		require.NoError(t, err)
		migRequireApplied(t, report.Applied,
			"DROP INDEX CONCURRENTLY IF EXISTS outbox_due_idx",
			"CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_due_idx ON outbox (due_at, id)")
		require.Equal(t, migIndexValid, migIndexState(t, pool, "outbox_due_idx"))
	})
}

// TestMigrateSplitsStatementsAsPostgreSQLDoes: semicolons in literals,
// quoted identifiers, dollar quotes and comments do not end statements;
// statements of a form migrate cannot check run every time.
func TestMigrateSplitsStatementsAsPostgreSQLDoes(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t)
	ctx := t.Context()
	script := `
-- a comment; with a semicolon
CREATE TABLE IF NOT EXISTS nf_split (
    a     text DEFAULT 'one;two -- not a comment',   -- a comment; too
    b     text DEFAULT E'it\'s; /* not a comment */',
    "c;d" text DEFAULT $x$three; $y$ four$x$
);
/* a block comment; /* nested; */ still one; */
COMMENT ON TABLE nf_split IS 'x;  y';
DO $$ BEGIN PERFORM 1; END $$;
CREATE INDEX IF NOT EXISTS nf_split_a_idx ON nf_split (a)`
	report, err := store.MigrateWith(ctx, pool, script, store.MigrateOptions{})
	require.NoError(t, err)
	migRequireApplied(t, report.Applied,
		"CREATE TABLE IF NOT EXISTS nf_split ( a text DEFAULT 'one;two -- not a comment', b text",
		"COMMENT ON TABLE nf_split IS 'x;  y'",
		"DO $$ BEGIN PERFORM 1; END $$",
		// A new table is seen by nobody yet: its index is built in the transaction.
		"CREATE INDEX IF NOT EXISTS nf_split_a_idx ON nf_split (a)")
	var a, b, cd, comment string
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO nf_split DEFAULT VALUES RETURNING a, b, "c;d", obj_description('nf_split'::regclass)`).
		Scan(&a, &b, &cd, &comment))
	require.Equal(t, []string{"one;two -- not a comment", "it's; /* not a comment */", "three; $y$ four", "x;  y"},
		[]string{a, b, cd, comment})

	report, err = store.MigrateWith(ctx, pool, script, store.MigrateOptions{})
	require.NoError(t, err)
	migRequireApplied(t, report.Applied, "COMMENT ON TABLE", "DO $$")

	for _, bad := range []string{"SELECT 'unclosed", `SELECT "unclosed`, "SELECT $a$ unclosed", "/* unclosed /* */"} {
		_, err := store.MigrateWith(ctx, pool, bad, store.MigrateOptions{})
		require.ErrorContains(t, err, "unterminated", bad)
	}
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

// migCatalog describes the public schema: columns, constraints, indexes
// (with their validity) and sequences with their owners, sorted, so that
// column order (a dropped and re-added column comes last) does not count.
func migCatalog(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
SELECT format('column %s.%s %s not null %s default %s', c.relname, a.attname,
              format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
FROM pg_constraint WHERE connamespace = 'public'::regnamespace
UNION ALL
SELECT format('index %s valid %s', pg_get_indexdef(i.indexrelid), i.indisvalid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'public'::regnamespace
UNION ALL
SELECT format('sequence %s %s max %s owned by %s', s.sequencename, s.data_type, s.max_value,
              (SELECT string_agg(pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), ', ')
               FROM pg_depend d
               WHERE d.classid = 'pg_class'::regclass AND d.objid = to_regclass(s.sequencename) AND d.deptype IN ('a', 'i')))
FROM pg_sequences s WHERE s.schemaname = 'public'
ORDER BY 1`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// migRequireApplied checks the statements a migration ran, each by its start.
func migRequireApplied(t *testing.T, applied []string, prefixes ...string) {
	t.Helper()
	require.Len(t, applied, len(prefixes), "applied: %q", applied)
	for i, p := range prefixes {
		require.True(t, strings.HasPrefix(applied[i], p), "statement %d is %q, want %q…", i, applied[i], p)
	}
}

func migRequirePgCode(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, code, pgErr.Code, "%v", err)
}
