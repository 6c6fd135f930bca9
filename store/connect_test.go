package store_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// gate is a TCP proxy in front of the test PostgreSQL server that hangs up
// on the connections that refuse returns true for (a server not up yet) and
// passes the others through.
type gate struct {
	ln       net.Listener
	target   string
	refuse   func(n int64) bool // n counts connections from 1
	accepted atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newGate(t *testing.T, refuse func(n int64) bool) *gate {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gate{ln: ln, target: u.Host, refuse: refuse}
	g.wg.Go(g.serve)
	t.Cleanup(func() {
		_ = ln.Close()
		g.mu.Lock()
		for _, c := range g.conns {
			_ = c.Close()
		}
		g.mu.Unlock()
		g.wg.Wait()
	})
	return g
}

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		if g.refuse(g.accepted.Add(1)) {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", g.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		g.mu.Lock()
		g.conns = append(g.conns, c, up)
		g.mu.Unlock()
		g.wg.Go(func() { _, _ = io.Copy(up, c); _ = up.Close() })
		g.wg.Go(func() { _, _ = io.Copy(c, up); _ = c.Close() })
	}
}

// url returns dbURL with its host replaced by the gate's.
func (g *gate) url(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Host = g.ln.Addr().String()
	return u.String()
}

func withUser(t *testing.T, dbURL, user string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.User(user)
	return u.String()
}

func withDBName(t *testing.T, dbURL, name string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

func TestConnect(t *testing.T) {
	t.Parallel()
	never := func(int64) bool { return false }
	always := func(int64) bool { return true }

	t.Run("ConnectsWithTheGivenPoolSize", func(t *testing.T) {
		t.Parallel()
		pool, err := store.Connect(t.Context(), testenv.NewDatabaseURL(t), 3, 0)
		require.NoError(t, err)
		defer pool.Close()
		require.Equal(t, int32(3), pool.Config().MaxConns)
		require.NoError(t, store.New(pool, nil).Ping(t.Context()))
	})

	t.Run("KeepsTheURLsPoolSizeWithoutOne", func(t *testing.T) {
		t.Parallel()
		u, err := url.Parse(testenv.NewDatabaseURL(t))
		require.NoError(t, err)
		q := u.Query()
		q.Set("pool_max_conns", "7")
		u.RawQuery = q.Encode()
		pool, err := store.Connect(t.Context(), u.String(), 0, 0)
		require.NoError(t, err)
		defer pool.Close()
		require.Equal(t, int32(7), pool.Config().MaxConns)
	})

	t.Run("RetriesUntilTheServerAnswers", func(t *testing.T) {
		t.Parallel()
		g := newGate(t, func(n int64) bool { return n <= 2 }) // down for two attempts
		pool, err := store.Connect(t.Context(), g.url(t, testenv.DatabaseURL()), 2, time.Minute)
		require.NoError(t, err)
		defer pool.Close()
		require.GreaterOrEqual(t, g.accepted.Load(), int64(3), "two refused attempts, then the one that answered")
		require.NoError(t, pool.Ping(t.Context()))
	})

	t.Run("GivesUpOnceTheWaitIsOver", func(t *testing.T) {
		t.Parallel()
		g := newGate(t, always)
		pool, err := store.Connect(t.Context(), g.url(t, testenv.DatabaseURL()), 2, 0)
		require.ErrorContains(t, err, "connect to database")
		require.Nil(t, pool)
		require.Positive(t, g.accepted.Load(), "it tried")
		require.False(t, store.IsDatabaseMissing(err))
	})

	t.Run("StopsWaitingWhenTheContextEnds", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		g := newGate(t, func(int64) bool { cancel(); return true }) // the caller gives up during the first attempt
		pool, err := store.Connect(ctx, g.url(t, testenv.DatabaseURL()), 2, time.Hour)
		require.Error(t, err)
		require.Nil(t, pool)
		require.Positive(t, g.accepted.Load())
	})

	t.Run("AMissingDatabaseFailsWithoutWaiting", func(t *testing.T) {
		t.Parallel()
		g := newGate(t, never)
		dbURL := g.url(t, withDBName(t, testenv.DatabaseURL(), "nf_test_no_such_database"))
		pool, err := store.Connect(t.Context(), dbURL, 2, time.Hour)
		require.Error(t, err)
		require.Nil(t, pool)
		require.True(t, store.IsDatabaseMissing(err), "%v", err)
		// With an hour to wait, returning at all says it did not retry:
		// waiting does not create a database.
		require.Positive(t, g.accepted.Load())
	})

	t.Run("AnUnknownRoleFailsWithoutWaiting", func(t *testing.T) {
		t.Parallel()
		g := newGate(t, never)
		dbURL := g.url(t, withUser(t, testenv.DatabaseURL(), "nf_test_no_such_role"))
		pool, err := store.Connect(t.Context(), dbURL, 2, time.Hour)
		require.Error(t, err)
		require.Nil(t, pool)
		require.False(t, store.IsDatabaseMissing(err))
		require.Positive(t, g.accepted.Load(), "returned within its hour: waiting does not create a role")
	})

	t.Run("ABadURLIsRefused", func(t *testing.T) {
		t.Parallel()
		pool, err := store.Connect(t.Context(), "postgres://%zz", 2, time.Hour)
		require.ErrorContains(t, err, "database url")
		require.Nil(t, pool)
		require.ErrorContains(t, store.CreateDatabase(t.Context(), "postgres://%zz"), "database url")
	})
}

func TestIsDatabaseMissing(t *testing.T) {
	t.Parallel()
	require.False(t, store.IsDatabaseMissing(nil))
	require.False(t, store.IsDatabaseMissing(errors.New("database \"x\" does not exist")), "only PostgreSQL's code counts")

	conn, err := pgx.Connect(t.Context(), withDBName(t, testenv.DatabaseURL(), "nf_test_no_such_database"))
	if conn != nil {
		_ = conn.Close(t.Context())
	}
	require.True(t, store.IsDatabaseMissing(err), "%v", err)
}

func TestCreateDatabaseFailures(t *testing.T) {
	t.Parallel()

	t.Run("AnUnreachableServer", func(t *testing.T) {
		t.Parallel()
		g := newGate(t, func(int64) bool { return true })
		err := store.CreateDatabase(t.Context(), g.url(t, withDBName(t, testenv.DatabaseURL(), "nf_test_never_created")))
		require.ErrorContains(t, err, "connect to maintenance database")
	})

	t.Run("ARoleThatMayNotCreateDatabases", func(t *testing.T) {
		t.Parallel()
		admin := testenv.Pool(t, testenv.DatabaseURL())
		suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
		role := "nf_test_role_" + suffix
		_, err := admin.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN NOCREATEDB")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })

		name := "nf_test_never_created_" + suffix
		err = store.CreateDatabase(t.Context(), withUser(t, withDBName(t, testenv.DatabaseURL(), name), role))
		require.ErrorContains(t, err, "create database "+name)
		require.ErrorContains(t, err, "permission denied")
		var exists bool
		require.NoError(t, admin.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
		require.False(t, exists)
	})
}

func TestMigrateFailures(t *testing.T) {
	t.Parallel()

	t.Run("AClosedPool", func(t *testing.T) {
		t.Parallel()
		pool := testenv.NewPool(t)
		pool.Close()
		require.ErrorContains(t, store.Migrate(t.Context(), pool), "migrate")
	})

	t.Run("ABadMigrationChangesNothingAndReleasesTheLock", func(t *testing.T) {
		t.Parallel()
		dbURL := testenv.NewDatabaseURL(t)
		pool := testenv.Pool(t, dbURL)
		bad := migFiles(t, map[string]string{
			"99901_bad.sql": "-- +goose Up\nCREATE TABLE nf_half_done (id int);\nSELECT no_such_function();\n",
		})
		_, err := store.MigrateWith(t.Context(), pool, store.MigrateOptions{Migrations: bad})
		require.ErrorContains(t, err, "migrate: 99901_bad.sql: SELECT no_such_function();")
		require.ErrorContains(t, err, "no_such_function")

		var n int
		require.NoError(t, pool.QueryRow(t.Context(),
			"SELECT count(*) FROM information_schema.tables WHERE table_name = 'nf_half_done'").Scan(&n))
		require.Zero(t, n, "a migration runs in one transaction: all or nothing")
		require.NotContains(t, migApplied(t, pool), int64(99901), "and is not recorded")
		// Another session takes the lock at once: the failed migration let it go.
		other, err := pgx.Connect(t.Context(), dbURL)
		require.NoError(t, err)
		var locked bool
		require.NoError(t, other.QueryRow(t.Context(), "SELECT pg_try_advisory_lock($1)", int64(0x6e6577736665)).Scan(&locked))
		require.NoError(t, other.Close(t.Context())) // and lets it go
		require.True(t, locked, "the migration lock is free")
		require.NoError(t, store.Migrate(t.Context(), pool))
	})
}
