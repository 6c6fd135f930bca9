package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/health"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// failingPosts is the real store with one failpoint: Post returns err.
type failingPosts struct {
	*store.DB
	err error
}

func (p failingPosts) Post(context.Context, int64) (domain.Post, error) { return domain.Post{}, p.err }

// TestErrorsAtTheEdge: an error the server does not recognise is a bug —
// 500 internal, logged at error with the request's id and the error, none
// of it sent — while a dependency failing, however the driver says it (a
// deadline, a refused or broken connection, PostgreSQL's or Redis's "not
// now"), is 503 unavailable with Retry-After, and a known outage's is
// logged at debug.
func TestErrorsAtTheEdge(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t)
	db := store.New(pool, nil)
	rdb, prefix := testenv.NewRedis(t)
	feeds := newFeeds(t, rdb, db, feed.Config{Prefix: prefix})
	serve := func(t *testing.T, err error) (*testBundle, *observer.ObservedLogs) {
		core, logs := observer.New(zapcore.DebugLevel)
		srv := httptest.NewServer(newAPI(t, failingPosts{db, err}, db, feeds,
			api.Config{Secret: testSecret, Logger: zap.New(core)}))
		t.Cleanup(srv.Close)
		return &testBundle{srv: srv, secret: testSecret}, logs
	}

	t.Run("UnknownIsInternal", func(t *testing.T) {
		t.Parallel()
		b, logs := serve(t, fmt.Errorf("get post 1: %w", errors.New("the code is wrong")))
		res := b.do(t, req{method: http.MethodGet, path: "/v1/posts/1", as: 1})
		requireError(t, res, http.StatusInternalServerError, "internal")
		require.NotContains(t, string(res.body), "the code is wrong", "details stay on the server")
		require.Empty(t, res.header.Get("Retry-After"), "a bug is not retried")
		lines := logs.FilterMessage("request failed").All()
		require.Len(t, lines, 1)
		require.Equal(t, zapcore.ErrorLevel, lines[0].Level)
		require.Equal(t, res.header.Get("X-Request-Id"), lines[0].ContextMap()["request_id"])
		require.Contains(t, lines[0].ContextMap()["error"], "the code is wrong")
	})

	for name, err := range map[string]error{
		"a deadline":             fmt.Errorf("get post 1: %w", context.DeadlineExceeded),
		"connection refused":     &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		"connection reset":       fmt.Errorf("get post 1: %w", syscall.ECONNRESET),
		"a reply cut short":      fmt.Errorf("get post 1: %w", io.ErrUnexpectedEOF),
		"statement_timeout":      fmt.Errorf("get post 1: %w", &pgconn.PgError{Code: "57014"}),
		"too many connections":   &pgconn.PgError{Code: "53300"},
		"the server shuts down":  &pgconn.PgError{Code: "57P01"},
		"Redis's pool is busy":   redis.ErrPoolTimeout,
		"the watch knows it":     &health.DownError{Name: health.Redis, Err: errors.New("not tried")},
		"domain.ErrUnavailable":  fmt.Errorf("postpone: %w", domain.ErrUnavailable),
		"a connection pgx broke": pgconn.ErrConnClosed,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, _ := serve(t, err)
			res := b.do(t, req{method: http.MethodGet, path: "/v1/posts/1", as: 1})
			requireError(t, res, http.StatusServiceUnavailable, "unavailable")
			require.Equal(t, "1", res.header.Get("Retry-After"))
		})
	}

	t.Run("AStatementErrorIsInternal", func(t *testing.T) {
		t.Parallel()
		b, _ := serve(t, &pgconn.PgError{Code: "42703", Message: `column "x" does not exist`})
		requireError(t, b.do(t, req{method: http.MethodGet, path: "/v1/posts/1", as: 1}), http.StatusInternalServerError, "internal")
	})
}

// silentListener accepts connections and never answers: a dependency behind
// a silent network partition. Its connections close with the test.
func silentListener(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := make(chan net.Conn, 1024)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- conn // read nothing, answer nothing
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for {
			select {
			case c := <-conns:
				_ = c.Close()
			default:
				return
			}
		}
	})
	return ln.Addr().String()
}

// TestSilentPostgreSQLAnswersInTime: with PostgreSQL silent, every route
// that needs it answers 503 unavailable with Retry-After within
// http.request_timeout (2 s here): the request's deadline reaches pgx,
// which gives up on the connection (no cancel request: the server would not
// answer that either). Redis holds nothing of the refused writes.
func TestSilentPostgreSQLAnswersInTime(t *testing.T) {
	t.Parallel()
	// connect_timeout ends the pool's background connects once the test is
	// over; the requests end long before, at their deadline.
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@"+silentListener(t)+"/nope?sslmode=disable&connect_timeout=5")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := store.New(pool, nil)
	rdb, prefix := testenv.NewRedis(t)
	feeds := newFeeds(t, rdb, db, feed.Config{Prefix: prefix, Backfill: 50})
	const timeout = 2 * time.Second
	srv := httptest.NewServer(newAPI(t, db, db, feeds, api.Config{Secret: testSecret, Truth: db, RequestTimeout: timeout}))
	t.Cleanup(srv.Close)
	b := &testBundle{srv: srv, secret: testSecret}

	for _, r := range []req{
		{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body": "x"}`)},
		{method: http.MethodGet, path: "/v1/posts/1"},
		{method: http.MethodPut, path: "/v1/following/2"},
		{method: http.MethodGet, path: "/v1/users/2/followers"},
		{method: http.MethodGet, path: "/v1/feed"},
	} {
		r.as = 1
		start := time.Now()
		res := b.do(t, r)
		took := time.Since(start)
		t.Logf("%s %s: %d after %s", r.method, r.path, res.status, took.Round(time.Millisecond))
		requireError(t, res, http.StatusServiceUnavailable, "unavailable")
		require.Equal(t, "1", res.header.Get("Retry-After"))
		require.Less(t, took, timeout, "%s %s answered within http.request_timeout", r.method, r.path)
	}
	keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		require.NotContains(t, k, ":following:", "a refused follow wrote nothing to Redis")
	}
}
