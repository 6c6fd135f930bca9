package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/health"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// observed serves the API with cfg on the test's database and Redis,
// logging at debug into the returned observer.
func observed(t *testing.T, cfg api.Config) (*testBundle, *observer.ObservedLogs) {
	t.Helper()
	pool := testenv.NewPool(t)
	db := store.New(pool, nil)
	rdb, prefix := testenv.NewRedis(t)
	feeds := newFeeds(t, rdb, db, feed.Config{Prefix: prefix, Backfill: 50})
	core, logs := observer.New(zapcore.DebugLevel)
	cfg.Secret, cfg.Logger = testSecret, zap.New(core)
	srv := httptest.NewServer(newAPI(t, db, db, feeds, cfg))
	t.Cleanup(srv.Close)
	return &testBundle{pool: pool, db: db, rdb: rdb, prefix: prefix, feeds: feeds, srv: srv, secret: testSecret}, logs
}

// accessLines returns the access log's lines.
func accessLines(logs *observer.ObservedLogs) []observer.LoggedEntry {
	return logs.FilterMessage("request").All()
}

// everything is every logged line, message and fields, as one string.
func everything(t *testing.T, logs *observer.ObservedLogs) string {
	t.Helper()
	var b strings.Builder
	for _, e := range logs.All() {
		raw, err := json.Marshal(e.ContextMap())
		require.NoError(t, err)
		b.WriteString(e.Message + " " + string(raw) + "\n")
	}
	return b.String()
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	b, logs := observed(t, api.Config{})

	for _, tc := range []struct {
		name, sent string
		kept       bool
	}{
		{"TakenFromTheClient", "req-7f3a.b_c:d/e+f=~", true},
		{"MadeWhenMissing", "", false},
		{"MadeWhenTooLong", strings.Repeat("a", 129), false},
		{"MadeWhenOddCharacters", "a b", false},
		{"MadeWhenControlCharacters", "a\tb", false},
		{"MadeWhenNotASCII", "été", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(accessLines(logs))
			res := b.do(t, req{method: http.MethodGet, path: "/v1/posts/1", as: 1, header: map[string]string{"X-Request-Id": tc.sent}})
			require.Equal(t, http.StatusNotFound, res.status)
			id := res.header.Get("X-Request-Id")
			if tc.kept {
				require.Equal(t, tc.sent, id)
			} else {
				require.Len(t, id, 26, "a new id: %q", id)
				require.NotEqual(t, tc.sent, id)
			}
			lines := accessLines(logs)[before:]
			require.Len(t, lines, 1)
			require.Equal(t, id, lines[0].ContextMap()["request_id"], "the access log has the id the response has")
		})
	}
	require.NotEqual(t, accessLines(logs)[1].ContextMap()["request_id"], accessLines(logs)[2].ContextMap()["request_id"],
		"each request its own id")
}

func TestAccessLog(t *testing.T) {
	t.Parallel()

	t.Run("OneLinePerRequestWithWhatAnOperatorNeeds", func(t *testing.T) {
		t.Parallel()
		b, logs := observed(t, api.Config{})
		res := b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body":"hello"}`), as: 42})
		require.Equal(t, http.StatusCreated, res.status)
		p := decodeStrict[apiPost](t, res.body)
		b.get(t, 42, "/v1/posts/"+jsonInt(p.ID))
		b.do(t, req{method: http.MethodGet, path: "/v1/nowhere/at/all"})

		lines := accessLines(logs)
		require.Len(t, lines, 3)
		created := lines[0].ContextMap()
		require.Equal(t, zapcore.InfoLevel, lines[0].Level)
		require.Equal(t, "POST", created["method"])
		require.Equal(t, "/v1/posts", created["route"])
		require.Equal(t, int64(http.StatusCreated), created["status"])
		require.Equal(t, int64(len(res.body)), created["bytes_out"])
		require.Equal(t, int64(42), created["user_id"])
		require.Equal(t, res.header.Get("X-Request-Id"), created["request_id"])
		require.IsType(t, time.Duration(0), created["duration"])
		require.Positive(t, created["duration"])

		got := lines[1].ContextMap()
		require.Equal(t, "/v1/posts/:id", got["route"], "the route's pattern")
		require.Equal(t, "/v1/posts/"+jsonInt(p.ID), got["path"])

		missing := lines[2].ContextMap()
		require.Equal(t, "unmatched", missing["route"])
		require.Equal(t, int64(http.StatusNotFound), missing["status"])
		require.NotContains(t, missing, "user_id", "not authenticated")
	})

	// Tokens never reach the log: not the Authorization header, not the
	// access_token query parameter of the stream (EventSource cannot send
	// headers), whatever the route answers.
	t.Run("NoTokenEverLogged", func(t *testing.T) {
		t.Parallel()
		b, logs := observed(t, api.Config{})
		token := b.token(t, 7)
		for _, path := range []string{
			"/v1/feed/stream?access_token=" + token,
			"/v1/feed?access_token=" + token,
			"/v1/feed?limit=x&access_token=" + token,
			"/nowhere?access_token=" + token,
		} {
			b.do(t, req{method: http.MethodGet, path: path})
			b.do(t, req{method: http.MethodGet, path: path, auth: "Bearer " + token})
			b.do(t, req{method: http.MethodGet, path: path, auth: "Bearer " + token + "tampered"})
		}
		require.Len(t, accessLines(logs), 12)
		all := everything(t, logs)
		signature := token[strings.LastIndex(token, ".")+1:]
		require.NotContains(t, all, signature, "a token, or its signature, is in the log")
		require.NotContains(t, all, "access_token")
	})

	t.Run("OperationsRoutesAtDebug", func(t *testing.T) {
		t.Parallel()
		// Answers as the real operations handler does, which the spec checks.
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/metrics":
				w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
				_, _ = w.Write([]byte("# HELP up Up.\n# TYPE up gauge\nup 1\n"))
			case "/readyz":
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"status":"ready"}`))
			default:
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"status":"ok"}`))
			}
		})
		b, logs := observed(t, api.Config{Ops: ok})
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/feed"} {
			require.Equal(t, http.StatusOK, b.get(t, 1, path).status, path)
		}
		lines := accessLines(logs)
		require.Len(t, lines, 4)
		for _, l := range lines[:3] {
			require.Equal(t, zapcore.DebugLevel, l.Level, "%v: balancers call it every few seconds", l.ContextMap()["route"])
		}
		require.Equal(t, zapcore.InfoLevel, lines[3].Level)
	})

	t.Run("AtItsOwnLevel", func(t *testing.T) {
		t.Parallel()
		b, logs := observed(t, api.Config{AccessLogLevel: zapcore.WarnLevel})
		b.get(t, 1, "/v1/feed")
		lines := accessLines(logs)
		require.Len(t, lines, 1)
		require.Equal(t, zapcore.WarnLevel, lines[0].Level)

		core, quiet := observer.New(zapcore.InfoLevel)
		rdb, prefix := testenv.NewRedis(t)
		off := httptest.NewServer(newAPI(t, b.db, b.db, newFeeds(t, rdb, b.db, feed.Config{Prefix: prefix}),
			api.Config{Secret: testSecret, Logger: zap.New(core), AccessLogLevel: zapcore.DebugLevel}))
		t.Cleanup(off.Close)
		(&testBundle{srv: off, secret: testSecret}).get(t, 1, "/v1/feed")
		require.Empty(t, accessLines(quiet), "below the logger's level: no access log")
	})
}

func jsonInt(n int64) string {
	raw, _ := json.Marshal(n)
	return string(raw)
}

// TestOutageLoggedOnce: while PostgreSQL is unreachable, many requests fail
// with 503; the outage is one line, each failure a debug line with its
// request's id, and no line carries a stack trace. Without anyone watching
// the dependencies, each failure is an error line of its own (no stack
// either), with its request's id.
func TestOutageLoggedOnce(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+deadAddr+"/nope?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := store.New(pool, nil)
	rdb, prefix := testenv.NewRedis(t)
	feeds := newFeeds(t, rdb, db, feed.Config{Prefix: prefix})
	serve := func(outages api.Outages, log *zap.Logger) *testBundle {
		srv := httptest.NewServer(newAPI(t, db, db, feeds, api.Config{Secret: testSecret, Logger: log, Outages: outages}))
		t.Cleanup(srv.Close)
		return &testBundle{srv: srv, secret: testSecret}
	}
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	watch := health.NewWatch(log, time.Minute, time.Second,
		health.Dependency{Name: "PostgreSQL", Key: "database.url", Ping: pool.Ping},
		health.Dependency{Name: "Redis", Key: "redis.url", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	b := serve(watch, log)

	const requests = 40
	ids := make(chan string, requests)
	var wg sync.WaitGroup
	token := b.token(t, 1)
	for range requests {
		wg.Go(func() {
			res, err := b.tryDo(req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body":"x"}`), auth: "Bearer " + token})
			if err == nil && res.status == http.StatusServiceUnavailable {
				ids <- res.header.Get("X-Request-Id")
			}
		})
	}
	wg.Wait()
	close(ids)
	require.Len(t, ids, requests, "every request answered 503")

	down := logs.FilterMessage("PostgreSQL is unreachable: what needs it fails, and is retried, until it answers").All()
	require.Len(t, down, 1, "one line for the outage, however many requests failed")
	require.Empty(t, logs.FilterMessageSnippet("Redis is").All(), "Redis answers")
	failed := logs.FilterMessage("request failed").All()
	require.Len(t, failed, requests)
	byID := map[string]bool{}
	for _, e := range failed {
		require.Equal(t, zapcore.DebugLevel, e.Level, "explained by the outage")
		byID[e.ContextMap()["request_id"].(string)] = true
	}
	for id := range ids {
		require.True(t, byID[id], "the failure of request %s is logged with its id", id)
	}
	for _, e := range logs.All() {
		require.Empty(t, e.Stack, "%s", e.Message)
	}

	core, unwatched := observer.New(zapcore.DebugLevel)
	alone := serve(nil, zap.New(core))
	res := alone.do(t, req{method: http.MethodGet, path: "/v1/posts/1", as: 1})
	require.Equal(t, http.StatusServiceUnavailable, res.status)
	lines := unwatched.FilterMessage("request failed").All()
	require.Len(t, lines, 1)
	require.Equal(t, zapcore.ErrorLevel, lines[0].Level)
	require.Equal(t, res.header.Get("X-Request-Id"), lines[0].ContextMap()["request_id"])
	require.Equal(t, "/v1/posts/:id", lines[0].ContextMap()["route"])
}
