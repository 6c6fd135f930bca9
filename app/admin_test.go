package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/admin"
	"github.com/newsfeed/newsfeed/internal/probe"
	"github.com/newsfeed/newsfeed/internal/testenv"
)

const consoleToken = "console-token-9f8e7d6c5b4a3210"

// runRole runs `newsfeed <args>` in this process with the environment as
// set, until the test ends, and returns its ops and API addresses once it
// is healthy.
func runRole(t *testing.T, args ...string) (metricsAddr, httpAddr string) {
	t.Helper()
	var err error
	metricsAddr, err = probe.FreeAddr()
	require.NoError(t, err)
	httpAddr, err = probe.FreeAddr()
	require.NoError(t, err)
	t.Setenv("NEWSFEED_METRICS_ADDR", metricsAddr)
	t.Setenv("NEWSFEED_HTTP_ADDR", httpAddr)
	ctx, cancel := context.WithCancel(context.Background())
	root := NewRootCommand()
	root.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	waitCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	require.NoError(t, probe.WaitHealthy(waitCtx, "http://"+metricsAddr))
	return metricsAddr, httpAddr
}

// get requests url with the bearer token (none when empty) and returns the
// status and body.
func get(t *testing.T, rawURL, bearer string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// consoleEnv points the process at the test's own database and Redis, the
// database's URL carrying a password (trust authentication ignores it).
func consoleEnv(t *testing.T) (dbPassword string) {
	t.Helper()
	u, err := url.Parse(testenv.NewDatabaseURL(t))
	require.NoError(t, err)
	dbPassword = "db-password-never-shown"
	u.User = url.UserPassword(u.User.Username(), dbPassword)
	t.Setenv("NEWSFEED_DATABASE_URL", u.String())
	t.Setenv("NEWSFEED_REDIS_URL", testenv.NewRedisDB(t))
	t.Setenv("NEWSFEED_LOG_LEVEL", "error")
	t.Setenv("NEWSFEED_AUTH_SECRET", "auth-secret-never-shown")
	return dbPassword
}

// TestConsoleOnTheOpsServer: serve's console answers on metrics.addr with
// admin.token, never on the API's address, and shows the configuration in
// effect with every secret masked.
func TestConsoleOnTheOpsServer(t *testing.T) {
	dbPassword := consoleEnv(t)
	t.Setenv("NEWSFEED_ADMIN_TOKEN", consoleToken)
	metricsAddr, httpAddr := runRole(t, "serve")

	status, body := get(t, "http://"+metricsAddr+"/admin/api/config", "")
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, _ = get(t, "http://"+metricsAddr+"/admin/api/config", "not-"+consoleToken)
	require.Equal(t, http.StatusUnauthorized, status)
	status, body = get(t, "http://"+metricsAddr+"/admin/api/config", consoleToken)
	require.Equal(t, http.StatusOK, status, body)
	for _, secret := range []string{consoleToken, dbPassword, "auth-secret-never-shown"} {
		require.NotContains(t, body, secret, "a secret in the console's configuration")
	}
	var settings admin.Settings
	require.NoError(t, json.Unmarshal([]byte(body), &settings))
	byKey := map[string]admin.Setting{}
	for _, s := range settings.Settings {
		byKey[s.Key] = s
	}
	require.Len(t, byKey, len(KnownKeys()), "every key")
	require.Equal(t, admin.Setting{Key: "admin.token", Value: "xxxxx", Source: "NEWSFEED_ADMIN_TOKEN"}, byKey["admin.token"])
	require.Equal(t, "xxxxx", byKey["auth.secret"].Value)
	require.Contains(t, byKey["database.url"].Value, ":xxxxx@", "the URL's password masked, the rest shown")
	require.Equal(t, admin.Setting{Key: "feed.max_len", Value: "800", Source: "default"}, byKey["feed.max_len"])

	status, _ = get(t, "http://"+metricsAddr+"/admin", "")
	require.Equal(t, http.StatusOK, status, "the page")
	for _, path := range []string{"/admin", "/admin/api/config", "/admin/api/outbox"} {
		status, body := get(t, "http://"+httpAddr+path, consoleToken)
		require.Equal(t, http.StatusNotFound, status, "the console on the public API's address: %s %s", path, body)
	}
}

// TestConsoleOffWithoutAToken: without admin.token a role's console
// refuses every request and says how to turn it on.
func TestConsoleOffWithoutAToken(t *testing.T) {
	consoleEnv(t)
	metricsAddr, _ := runRole(t, "dispatch")
	for _, path := range []string{"/admin", "/admin/api/outbox"} {
		status, body := get(t, "http://"+metricsAddr+path, consoleToken)
		require.Equal(t, http.StatusForbidden, status, path)
		require.Contains(t, body, "admin.token is not set", path)
	}
	status, _ := get(t, "http://"+metricsAddr+"/metrics", "")
	require.Equal(t, http.StatusOK, status, "the rest of the ops server as it was")
}

// TestConsoleOpenInDevelopmentMode: `work --dev` without admin.token
// serves its console to anybody, and says so.
func TestConsoleOpenInDevelopmentMode(t *testing.T) {
	consoleEnv(t)
	metricsAddr, _ := runRole(t, "work", "--dev")
	status, body := get(t, "http://"+metricsAddr+"/admin/api/overview", "")
	require.Equal(t, http.StatusOK, status, body)
	var o admin.Overview
	require.NoError(t, json.Unmarshal([]byte(body), &o))
	require.True(t, o.Open)
	require.Equal(t, []string{"work"}, o.Roles)
	require.True(t, strings.HasPrefix(o.Version, "newsfeed "), o.Version)
	status, body = get(t, "http://"+metricsAddr+"/admin/api/queue", "")
	require.Equal(t, http.StatusOK, status, body)
}
