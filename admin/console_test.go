package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/newsfeed/newsfeed/admin"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/queue"
	"github.com/newsfeed/newsfeed/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakOptions()...)
}

const token = "test-admin-token-0123456789abcdef"

type testBundle struct {
	pool  *pgxpool.Pool
	db    *store.DB
	rdb   *redis.Client
	queue *queue.Queue
	reg   *prometheus.Registry
}

// setup returns a console on the test's own database and Redis prefix,
// changed by opts, and what it reads.
func setup(t *testing.T, opts ...func(*admin.Config)) (*admin.Console, *testBundle) {
	t.Helper()
	pool := testenv.NewPool(t)
	rdb, prefix := testenv.NewRedis(t)
	b := &testBundle{pool: pool, db: store.New(pool, nil), rdb: rdb, queue: queue.New(rdb, prefix+"tickets", "fanout"),
		reg: prometheus.NewRegistry()}
	cfg := admin.Config{
		Token:    token,
		Outbox:   b.db,
		Queue:    b.queue,
		Gatherer: b.reg,
		Settings: []admin.Setting{{Key: "auth.secret", Value: "xxxxx", Source: "NEWSFEED_AUTH_SECRET"}},
		Process:  admin.Process{Roles: []string{"dispatch"}, Version: "newsfeed test", StartedAt: time.Now()},
	}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := admin.New(cfg)
	require.NoError(t, err)
	return c, b
}

// response is an answer of the console, its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the code and message of an error body, failing the
// test if the body is not the project's error shape.
func (r response) errorCode(t *testing.T) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &e), string(r.body))
	require.NotEmpty(t, e.Error.Code, string(r.body))
	require.NotEmpty(t, e.Error.Message, string(r.body))
	return e.Error.Code, e.Error.Message
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.NoError(t, json.Unmarshal(r.body, v), string(r.body))
}

// call sends a request to the console; bearer "" sends no Authorization.
func call(t *testing.T, h http.Handler, method, target, bearer string) response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return response{status: rec.Code, header: rec.Header(), body: body}
}

// apiRoutes are every route of the console's API, with a method it answers.
var apiRoutes = [][2]string{
	{"GET", "/admin/api/overview"},
	{"GET", "/admin/api/outbox"},
	{"GET", "/admin/api/outbox/dead"},
	{"POST", "/admin/api/outbox/dead/1/retry"},
	{"GET", "/admin/api/queue"},
	{"GET", "/admin/api/metrics"},
	{"GET", "/admin/api/config"},
}

func TestAuthentication(t *testing.T) {
	t.Parallel()

	t.Run("RefusedWithoutTheToken", func(t *testing.T) {
		t.Parallel()
		c, _ := setup(t)
		for _, r := range apiRoutes {
			for _, header := range []string{"", "Bearer", "Bearer wrong-token", "Basic " + token, token, "Bearer " + token + "x",
				"Bearer " + token[:len(token)-1]} {
				req := httptest.NewRequest(r[0], r[1], nil)
				if header != "" {
					req.Header.Set("Authorization", header)
				}
				rec := httptest.NewRecorder()
				c.ServeHTTP(rec, req)
				res := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
				require.Equal(t, http.StatusUnauthorized, res.status, "%s %s with %q", r[0], r[1], header)
				code, _ := res.errorCode(t)
				require.Equal(t, "unauthenticated", code)
				require.Contains(t, res.header.Get("WWW-Authenticate"), `Bearer realm="newsfeed-admin"`)
			}
		}
	})

	t.Run("AcceptedWithTheToken", func(t *testing.T) {
		t.Parallel()
		c, _ := setup(t)
		for _, r := range apiRoutes {
			res := call(t, c, r[0], r[1], token)
			require.NotEqual(t, http.StatusUnauthorized, res.status, "%s %s: %s", r[0], r[1], res.body)
			require.NotEqual(t, http.StatusForbidden, res.status, "%s %s: %s", r[0], r[1], res.body)
		}
		var o admin.Overview
		call(t, c, "GET", "/admin/api/overview", token).decode(t, &o)
		require.False(t, o.Open)
		require.Equal(t, []string{"dispatch"}, o.Roles)
		// The scheme is case-insensitive, as HTTP's are.
		req := httptest.NewRequest("GET", "/admin/api/overview", nil)
		req.Header.Set("Authorization", "bearer "+token)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code)
	})

	t.Run("ThePageNeedsNoToken", func(t *testing.T) {
		t.Parallel()
		c, _ := setup(t)
		res := call(t, c, "GET", "/admin", "")
		require.Equal(t, http.StatusOK, res.status)
		require.Equal(t, "text/html; charset=utf-8", res.header.Get("Content-Type"))
		require.Contains(t, res.header.Get("Content-Security-Policy"), "default-src 'none'")
		require.Equal(t, "DENY", res.header.Get("X-Frame-Options"))
		require.NotContains(t, string(res.body), token)
		for _, file := range []string{"console.js", "api.js", "panels.js", "charts.js", "format.js", "style.css", "icon.svg"} {
			res := call(t, c, "GET", "/admin/assets/"+file, "")
			require.Equal(t, http.StatusOK, res.status, file)
			require.Equal(t, "nosniff", res.header.Get("X-Content-Type-Options"))
			require.Contains(t, string(res.body), map[bool]string{true: "<svg", false: ""}[strings.HasSuffix(file, ".svg")])
		}
		res = call(t, c, "GET", "/admin/", "")
		require.Equal(t, http.StatusMovedPermanently, res.status)
		require.Equal(t, "/admin", res.header.Get("Location"))
	})

	t.Run("OffWithoutAToken", func(t *testing.T) {
		t.Parallel()
		c, _ := setup(t, func(cfg *admin.Config) { cfg.Token = "" })
		require.Equal(t, "off", c.Mode())
		for _, target := range []string{"/admin", "/admin/assets/console.js", "/admin/api/overview", "/admin/api/outbox/dead"} {
			res := call(t, c, "GET", target, token)
			require.Equal(t, http.StatusForbidden, res.status, target)
			code, message := res.errorCode(t)
			require.Equal(t, "forbidden", code)
			require.Contains(t, message, "admin.token is not set")
		}
	})

	t.Run("OpenInDevelopmentMode", func(t *testing.T) {
		t.Parallel()
		c, _ := setup(t, func(cfg *admin.Config) { cfg.Token, cfg.Open = "", true })
		require.Equal(t, "open", c.Mode())
		for _, r := range apiRoutes {
			res := call(t, c, r[0], r[1], "")
			require.NotEqual(t, http.StatusUnauthorized, res.status, "%s %s", r[0], r[1])
			require.NotEqual(t, http.StatusForbidden, res.status, "%s %s", r[0], r[1])
		}
		var o admin.Overview
		call(t, c, "GET", "/admin/api/overview", "").decode(t, &o)
		require.True(t, o.Open, "the page says the console is open")
	})

	t.Run("ATokenBeatsDevelopmentMode", func(t *testing.T) {
		t.Parallel()
		c, _ := setup(t, func(cfg *admin.Config) { cfg.Open = true })
		require.Equal(t, "token", c.Mode())
		require.Equal(t, http.StatusUnauthorized, call(t, c, "GET", "/admin/api/overview", "").status)
		require.Equal(t, http.StatusOK, call(t, c, "GET", "/admin/api/overview", token).status)
	})
}

func TestRouting(t *testing.T) {
	t.Parallel()
	c, _ := setup(t)
	for _, tc := range []struct {
		method, target string
		status         int
		code, allow    string
	}{
		{"GET", "/admin/api/nothing", http.StatusNotFound, "not_found", ""},
		{"GET", "/admin/elsewhere", http.StatusNotFound, "not_found", ""},
		{"GET", "/admin/assets/missing.js", http.StatusNotFound, "not_found", ""},
		{"GET", "/admin/assets/index.html", http.StatusNotFound, "not_found", ""},
		{"POST", "/admin/api/outbox", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD"},
		{"GET", "/admin/api/outbox/dead/1/retry", http.StatusMethodNotAllowed, "method_not_allowed", "POST"},
		{"DELETE", "/admin", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD"},
	} {
		res := call(t, c, tc.method, tc.target, token)
		require.Equal(t, tc.status, res.status, "%s %s: %s", tc.method, tc.target, res.body)
		code, _ := res.errorCode(t)
		require.Equal(t, tc.code, code, "%s %s", tc.method, tc.target)
		require.Equal(t, tc.allow, res.header.Get("Allow"), "%s %s", tc.method, tc.target)
	}
}

func TestConfigPanel(t *testing.T) {
	t.Parallel()
	c, _ := setup(t)
	var s admin.Settings
	call(t, c, "GET", "/admin/api/config", token).decode(t, &s)
	require.Equal(t, []admin.Setting{{Key: "auth.secret", Value: "xxxxx", Source: "NEWSFEED_AUTH_SECRET"}}, s.Settings)
}

func TestNewChecksItsConfig(t *testing.T) {
	t.Parallel()
	_, err := admin.New(admin.Config{Token: token})
	require.ErrorContains(t, err, "required")

	for field, change := range map[string]func(*admin.Config){
		"Config.SampleEvery":       func(cfg *admin.Config) { cfg.SampleEvery = -time.Second },
		"Config.Samples":           func(cfg *admin.Config) { cfg.Samples = -1 },
		"Config.DependencyTimeout": func(cfg *admin.Config) { cfg.DependencyTimeout = -time.Second },
	} {
		// New only keeps what it reads from: nothing is read here.
		cfg := admin.Config{Token: token, Outbox: (*store.DB)(nil), Queue: (*queue.Queue)(nil), Gatherer: prometheus.NewRegistry()}
		change(&cfg)
		_, err := admin.New(cfg)
		require.ErrorContains(t, err, "admin: "+field+" is -", field)
		require.ErrorContains(t, err, "out of range", field)
	}
}
