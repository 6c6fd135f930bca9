package bench

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/probe"
	"github.com/newsfeed/newsfeed/internal/testenv"
)

func TestWithDatabaseSuffix(t *testing.T) {
	got, err := withDatabaseSuffix("postgres://u@127.0.0.1:5432/newsfeed?sslmode=disable", DatabaseSuffix)
	require.NoError(t, err)
	require.Equal(t, "postgres://u@127.0.0.1:5432/newsfeed_bench?sslmode=disable", got)
}

// TestFreshDatabase: the bench's database, beside database.url's, is
// dropped so that the run that follows starts from nothing.
func TestFreshDatabase(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.NewDatabaseURL(t)
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	name := cfg.Database + DatabaseSuffix
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	t.Cleanup(func() { // before the connection closes
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	})
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)

	got, err := FreshDatabase(ctx, dbURL)
	require.NoError(t, err)
	gotCfg, err := pgx.ParseConfig(got)
	require.NoError(t, err)
	require.Equal(t, name, gotCfg.Database)
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	require.False(t, exists, "the bench database was not dropped")
}

// healthz serves /healthz on a free address until ctx ends.
func healthz(t *testing.T) (string, func(ctx context.Context) error) {
	addr, err := probe.FreeAddr()
	require.NoError(t, err)
	return "http://" + addr, func(ctx context.Context) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
		closed := make(chan struct{})
		go func() { defer close(closed); <-ctx.Done(); _ = srv.Close() }()
		_ = srv.Serve(ln)
		<-closed // the listener and every connection too: once front returns, nothing answers
		return nil
	}
}

// TestStartInProcess: the bench's key prefix is cleared (and nothing else),
// the workers stop apart from the front, and the cleanup stops every role
// before it closes the system.
func TestStartInProcess(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.NewRedis(t)
	_, other := testenv.NewRedis(t)
	for i := range 2500 { // more than one batch of deletes
		require.NoError(t, rdb.Set(ctx, prefix+"k"+strconv.Itoa(i), "v", time.Hour).Err())
	}
	require.NoError(t, rdb.Set(ctx, other+"kept", "v", time.Hour).Err())

	url, front := healthz(t)
	var frontDone, workersDone, closed atomic.Bool
	h, cleanup, err := StartInProcess(ctx, Harness{APIURL: url, Redis: rdb, Prefix: prefix}, Roles{
		Front: func(ctx context.Context) error {
			defer frontDone.Store(true)
			return front(ctx)
		},
		Workers: func(ctx context.Context) error {
			<-ctx.Done()
			workersDone.Store(true)
			return nil
		},
		Close: func() {
			require.True(t, frontDone.Load() && workersDone.Load(), "closed before its roles stopped")
			closed.Store(true)
		},
	})
	require.NoError(t, err)
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	require.NoError(t, err)
	require.Empty(t, keys)
	require.EqualValues(t, 1, rdb.Exists(ctx, other+"kept").Val(), "a key outside the prefix was deleted")

	require.NotNil(t, h.StopWorkers)
	h.StopWorkers()
	require.True(t, workersDone.Load())
	require.False(t, frontDone.Load(), "stopping the workers stopped the front")
	require.NoError(t, probe.WaitHealthy(ctx, url))

	require.NoError(t, rdb.Set(ctx, prefix+"written by the run", "v", time.Hour).Err())
	cleanup()
	require.True(t, closed.Load())
	keys, err = rdb.Keys(ctx, prefix+"*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "the cleanup clears what the run wrote")
	require.EqualValues(t, 1, rdb.Exists(ctx, other+"kept").Val(), "a key outside the prefix was deleted")
}

// TestStartInProcessUnhealthy: an API that never answers ends the start
// with an error, its roles stopped and the system closed.
func TestStartInProcessUnhealthy(t *testing.T) {
	rdb, prefix := testenv.NewRedis(t)
	addr, err := probe.FreeAddr() // nothing listens
	require.NoError(t, err)
	// Long enough for the prefix's SCAN on a loaded machine: the start
	// must fail on the health check, not before it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var stopped atomic.Int64
	var closed atomic.Bool
	role := func(ctx context.Context) error { <-ctx.Done(); stopped.Add(1); return nil }
	_, _, err = StartInProcess(ctx, Harness{APIURL: "http://" + addr, Redis: rdb, Prefix: prefix},
		Roles{Front: role, Workers: role, Close: func() { closed.Store(true) }})
	require.ErrorContains(t, err, "did not become healthy")
	require.EqualValues(t, 2, stopped.Load())
	require.True(t, closed.Load())
}

// TestStartInProcessNeedsPrefix: without a prefix the bench would clear
// the whole Redis database; it refuses.
func TestStartInProcessNeedsPrefix(t *testing.T) {
	var closed bool
	_, _, err := StartInProcess(context.Background(), Harness{}, Roles{Close: func() { closed = true }})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "prefix"), err.Error())
	require.True(t, closed)
}

func TestAttach(t *testing.T) {
	url, front := healthz(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	frontDone := make(chan struct{})
	go func() { defer close(frontDone); _ = front(ctx) }()
	var closed bool
	h, cleanup, err := Attach(context.Background(), Harness{APIURL: url, Prefix: "p:"}, func() { closed = true })
	require.NoError(t, err)
	require.Equal(t, "p:", h.Prefix)
	require.Nil(t, h.StopWorkers, "processes that run already have no in-process workers")
	require.False(t, closed)
	cleanup()
	require.True(t, closed)

	stop()
	<-frontDone // the server is closed, not only told to close
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	closed = false
	_, _, err = Attach(short, Harness{APIURL: url}, func() { closed = true })
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded), err.Error())
	require.True(t, closed, "connections not released")
}
