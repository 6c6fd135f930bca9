package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// The store starts goroutines (Listen); none may outlive the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakOptions()...)
}

type testBundle struct {
	pool *pgxpool.Pool
}

// setup returns a store on a database of the test's own.
func setup(t *testing.T) (*store.DB, *testBundle) {
	t.Helper()
	pool := testenv.NewPool(t)
	return store.New(pool, nil), &testBundle{pool: pool}
}

// outboxRow is an outbox row as the table holds it.
type outboxRow struct {
	ID          int64
	Type        string
	Payload     json.RawMessage
	Status      string
	Attempts    int
	LastError   *string
	DueIn       time.Duration // due_at - now(), on the database clock
	CreatedAt   time.Time
	PublishedAt *time.Time
	FinishedAt  *time.Time
}

const outboxRowSQL = `
SELECT id, event_type, payload, status, attempts, last_error,
       extract(epoch FROM due_at - now())::float8, created_at, published_at, finished_at
FROM outbox`

func scanOutboxRow(row pgx.CollectableRow) (outboxRow, error) {
	var r outboxRow
	var dueIn float64
	err := row.Scan(&r.ID, &r.Type, &r.Payload, &r.Status, &r.Attempts, &r.LastError,
		&dueIn, &r.CreatedAt, &r.PublishedAt, &r.FinishedAt)
	r.DueIn = time.Duration(dueIn * float64(time.Second))
	return r, err
}

// outboxRows returns every outbox row, oldest first.
func outboxRows(t *testing.T, pool *pgxpool.Pool) []outboxRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), outboxRowSQL+" ORDER BY id")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, scanOutboxRow)
	require.NoError(t, err)
	return out
}

// getOutboxRow returns one outbox row.
func getOutboxRow(t *testing.T, pool *pgxpool.Pool, id int64) outboxRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), outboxRowSQL+" WHERE id = $1", id)
	require.NoError(t, err)
	r, err := pgx.CollectExactlyOneRow(rows, scanOutboxRow)
	require.NoError(t, err)
	return r
}

// outboxRowsOfType returns the outbox rows of one event type, oldest first.
func outboxRowsOfType(t *testing.T, pool *pgxpool.Pool, typ string) []outboxRow {
	t.Helper()
	var out []outboxRow
	for _, r := range outboxRows(t, pool) {
		if r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

// insertEvents writes n pending post.created rows directly and returns their ids.
func insertEvents(t *testing.T, pool *pgxpool.Pool, n int) []int64 {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
INSERT INTO outbox (event_type, payload)
SELECT 'post.created', jsonb_build_object('post_id', g, 'author_id', 1)
FROM generate_series(1, $1) g
ORDER BY g
RETURNING id`, n)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, n)
	return ids
}

// exec runs SQL that arranges a test's preconditions.
func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

func decodeJSON[T any](t *testing.T, raw []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(raw, &v), "payload %s", raw)
	return v
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("RunsAgainOnAMigratedDatabaseAndKeepsData", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		first, _, err := db.CreatePost(ctx, 1, "before migrate", "")
		require.NoError(t, err)

		require.NoError(t, store.Migrate(ctx, bundle.pool))
		require.NoError(t, store.Migrate(ctx, bundle.pool))

		got, err := db.Post(ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, "before migrate", got.Body)
		require.Len(t, outboxRows(t, bundle.pool), 1)
		// The id sequence was not reset.
		second, _, err := db.CreatePost(ctx, 1, "after migrate", "")
		require.NoError(t, err)
		require.Greater(t, second.ID, first.ID)
	})

	t.Run("TwoConcurrentMigrationsOfAMigratedDatabaseBothSucceed", func(t *testing.T) {
		t.Parallel()
		url := testenv.NewDatabaseURL(t)
		requireConcurrentMigrations(t, url)
	})

	t.Run("TwoConcurrentMigrationsOfAnEmptyDatabaseBothSucceed", func(t *testing.T) {
		t.Parallel()
		url := newEmptyDatabase(t)
		requireConcurrentMigrations(t, url)

		db := store.New(testenv.Pool(t, url), nil)
		p, created, err := db.CreatePost(t.Context(), 7, "hello", "k")
		require.NoError(t, err)
		require.True(t, created)
		require.Positive(t, p.ID)
	})
}

// requireConcurrentMigrations runs two migrations at once, each on its own pool.
func requireConcurrentMigrations(t *testing.T, url string) {
	t.Helper()
	pools := []*pgxpool.Pool{testenv.Pool(t, url), testenv.Pool(t, url)}
	errs := make([]error, len(pools))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Go(func() {
			<-start
			errs[i] = store.Migrate(t.Context(), pool)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "migration %d", i)
	}
	var tables int
	require.NoError(t, pools[0].QueryRow(t.Context(), `
SELECT count(*) FROM information_schema.tables
WHERE table_schema = 'public' AND table_name IN ('posts', 'follows', 'follower_counts', 'outbox')`).Scan(&tables))
	require.Equal(t, 4, tables)
}

// newEmptyDatabase creates a database without the schema, through
// store.CreateDatabase, named so that testenv drops it if the run is killed.
func newEmptyDatabase(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL())
	require.NoError(t, err)
	name := fmt.Sprintf("nf_test_%d_empty%d", time.Now().Unix(), time.Now().UnixNano()%1_000_000_000)
	u.Path = "/" + name
	dbURL := u.String()

	require.NoError(t, store.CreateDatabase(t.Context(), dbURL))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testenv.DatabaseURL())
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	// Creating it again is a no-op.
	require.NoError(t, store.CreateDatabase(t.Context(), dbURL))

	var tables int
	pool := testenv.Pool(t, dbURL)
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'`).Scan(&tables))
	require.Zero(t, tables, "the database is empty")
	return dbURL
}

func TestNotifyWakesListener(t *testing.T) {
	t.Parallel()
	url := testenv.NewDatabaseURL(t)
	pool := testenv.Pool(t, url)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wake := listen(t, ctx, url, zap.NewNop())
	received := func() bool {
		select {
		case <-wake:
			return true
		default:
			return false
		}
	}
	// One signal once it listens: notifications may have been missed before.
	require.Eventually(t, received, 10*time.Second, 5*time.Millisecond)
	require.False(t, received(), "no signal without a notification")

	n := store.NewNotifier(pool, zap.NewNop())
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, n.Run(ctx)) })
	n.Notify()
	require.Eventually(t, received, 10*time.Second, 5*time.Millisecond)

	cancel()
	wg.Wait()
}

// listen runs a Listener on url until ctx ends and returns its wake-ups;
// when the test ends it requires that Run returned nil.
func listen(t *testing.T, ctx context.Context, url string, log *zap.Logger) <-chan struct{} {
	t.Helper()
	l := store.NewListener(url, log)
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Listener.Run did not return within 10s after its context ended")
		}
	})
	return l.Wake()
}

// waitSignal waits for a wake-up from a Listener (failing after 10s).
func waitSignal(t *testing.T, wake <-chan struct{}) {
	t.Helper()
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up from the listener")
	}
}

// requireNoSignal requires that no wake-up is waiting.
func requireNoSignal(t *testing.T, wake <-chan struct{}) {
	t.Helper()
	select {
	case <-wake:
		t.Fatal("a wake-up without a notification")
	default:
	}
}

func TestListen(t *testing.T) {
	t.Parallel()

	t.Run("ReconnectsAndSignalsAfterLosingItsConnection", func(t *testing.T) {
		t.Parallel()
		url := testenv.NewDatabaseURL(t)
		pool := testenv.Pool(t, url)
		core, logs := observer.New(zap.DebugLevel)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		wake := listen(t, ctx, url, zap.New(core))
		waitSignal(t, wake)
		first := listenerPID(t, pool)

		// The server drops the listener's session (a restart, a failover).
		var terminated bool
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", first).Scan(&terminated))
		require.True(t, terminated)

		// It listens again on a new session and signals, since
		// notifications may have been missed meanwhile.
		waitSignal(t, wake)
		second := listenerPID(t, pool)
		require.NotEqual(t, first, second)
		require.Equal(t, 1, logs.FilterMessage("outbox listener lost its connection; reconnecting").Len())
		requireNoSignal(t, wake)

		_, err := pool.Exec(t.Context(), "SELECT pg_notify($1, '')", store.OutboxChannel)
		require.NoError(t, err)
		waitSignal(t, wake)
	})

	t.Run("KeepsTryingWhileTheServerRefuses", func(t *testing.T) {
		t.Parallel()
		core, logs := observer.New(zap.DebugLevel)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		u, err := url.Parse(testenv.DatabaseURL())
		require.NoError(t, err)
		u.Path = "/nf_test_no_such_database"
		wake := listen(t, ctx, u.String(), zap.New(core))
		require.Eventually(t, func() bool {
			return logs.FilterMessage("outbox listener lost its connection; reconnecting").Len() >= 2
		}, 10*time.Second, 5*time.Millisecond, "a second attempt after the first failed")
		requireNoSignal(t, wake)
		cancel() // and the goroutine ends: goleak checks at the end
	})
}

// listenerPID waits for the one session of the test's database that
// LISTENs and returns its pid.
func listenerPID(t *testing.T, pool *pgxpool.Pool) int32 {
	t.Helper()
	var pid int32
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rows, err := pool.Query(context.Background(), `
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`)
		require.NoError(c, err)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		require.NoError(c, err)
		require.Len(c, pids, 1)
		pid = pids[0]
	}, 10*time.Second, 5*time.Millisecond)
	return pid
}

func TestNotifierKeepsRunningWhenNotifyFails(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t)
	pool.Close()
	core, logs := observer.New(zap.DebugLevel)
	n := store.NewNotifier(pool, zap.New(core))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, n.Run(ctx)) })

	failures := func() int { return logs.FilterMessage("outbox notify failed; dispatchers will poll").Len() }
	n.Notify()
	require.Eventually(t, func() bool { return failures() == 1 }, 10*time.Second, 5*time.Millisecond)
	// Still running: the next request is tried (and fails) too.
	require.Eventually(t, func() bool { n.Notify(); return failures() >= 2 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	wg.Wait()
	require.Equal(t, zap.DebugLevel, logs.All()[0].Level, "a lost wake-up costs a poll: not worth more than debug")
}

func TestPing(t *testing.T) {
	t.Parallel()
	db, bundle := setup(t)
	require.NoError(t, db.Ping(t.Context()))
	bundle.pool.Close()
	require.Error(t, db.Ping(t.Context()))
}
