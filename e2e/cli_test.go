package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// runIn runs the binary in dir with extra environment and returns stdout,
// stderr and the exit code.
func runIn(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(hostEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestBadConfiguration: each mistake ends the process with status 1 and one
// line on stderr that names the key or the cause.
func TestBadConfiguration(t *testing.T) {
	t.Parallel()
	noDB := []string{"NEWSFEED_DATABASE_CONNECT_WAIT=1s", "NEWSFEED_AUTH_SECRET=x", "NEWSFEED_METRICS_ADDR="}
	cases := []struct {
		name  string
		file  string
		env   []string
		args  []string
		wants string
	}{
		{name: "unparsable file", file: "feed: [unclosed\n", args: []string{"serve"}, wants: "config.yaml"},
		{name: "unknown key in file", file: "feed:\n  max_length: 5\n", args: []string{"serve"}, wants: "feed.max_length"},
		{name: "wrong type in env", env: []string{"NEWSFEED_FEED_MAX_LEN=many"}, args: []string{"serve"}, wants: "max_len"},
		{name: "out of range", env: []string{"NEWSFEED_FANOUT_CONCURRENCY=0"}, args: []string{"work"}, wants: "fanout.concurrency"},
		{name: "missing explicit file", args: []string{"--config", "nope.yaml", "serve"}, wants: "nope.yaml"},
		{name: "unknown role", args: []string{"cook"}, wants: `unknown command "cook"`},
		{name: "serve without a secret", env: []string{"NEWSFEED_AUTH_SECRET="}, args: []string{"serve"}, wants: "auth.secret"},
		{name: "unreachable database", env: []string{"NEWSFEED_DATABASE_URL=postgres://postgres@127.0.0.1:1/x"}, args: []string{"dispatch"}, wants: "database.url"},
		{name: "unreachable redis", env: []string{"NEWSFEED_DATABASE_URL=" + testDatabaseURL(t), "NEWSFEED_REDIS_URL=redis://127.0.0.1:1/0"}, args: []string{"work"}, wants: "redis.url"},
		{name: "token without user", args: []string{"token"}, wants: "user"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tc.file != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(tc.file), 0o644))
			}
			stdout, stderr, code := runIn(t, dir, append(append([]string{}, noDB...), tc.env...), tc.args...)
			require.Equal(t, 1, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			require.Len(t, lines, 1, "one line on stderr: %q", stderr)
			require.Contains(t, lines[0], tc.wants)
		})
	}
}

// testDatabaseURL is a database that answers (the maintenance one).
func testDatabaseURL(t *testing.T) string {
	t.Helper()
	return testenv.DatabaseURL()
}

// TestToken: the token alone on stdout, HS256 with sub and exp, signed with
// the configured secret; flags beat env beat file.
func TestToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("auth:\n  secret: from-file\n"), 0o644))

	parse := func(raw, secret string) *jwt.RegisteredClaims {
		var claims jwt.RegisteredClaims
		_, err := jwt.ParseWithClaims(strings.TrimSpace(raw), &claims, func(*jwt.Token) (any, error) { return []byte(secret), nil },
			jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
		require.NoError(t, err)
		return &claims
	}
	stdout, stderr, code := runIn(t, dir, nil, "token", "--user", "42", "--ttl", "1h")
	require.Zero(t, code, stderr)
	require.Equal(t, 1, strings.Count(stdout, "\n"), "the token alone on stdout")
	claims := parse(stdout, "from-file")
	require.Equal(t, "42", claims.Subject)
	require.WithinDuration(t, time.Now().Add(time.Hour), claims.ExpiresAt.Time, time.Minute)

	stdout, _, code = runIn(t, dir, []string{"NEWSFEED_AUTH_SECRET=from-env"}, "token", "--user", "7")
	require.Zero(t, code)
	require.Equal(t, "7", parse(stdout, "from-env").Subject)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), parse(stdout, "from-env").ExpiresAt.Time, time.Minute)
}

// TestMigrate: migrate creates the database when it is missing, and is
// idempotent and safe when several run at once.
func TestMigrate(t *testing.T) {
	t.Parallel()
	c := newCluster(t) // a database with the schema; we migrate a new one beside it
	name := "nf_test_" + strings.ReplaceAll(time.Now().Format("20060102150405.000000"), ".", "_")
	dbURL := strings.Replace(c.dbURL, filepath.Base(strings.Split(c.dbURL, "?")[0]), name, 1)
	t.Cleanup(func() { _, _ = c.pool.Exec(t.Context(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	env := []string{"NEWSFEED_DATABASE_URL=" + dbURL}
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, codes[i] = runIn(t, t.TempDir(), env, "migrate")
		}()
	}
	wg.Wait()
	require.Equal(t, []int{0, 0, 0, 0}, codes)
	_, stderr, code := runIn(t, t.TempDir(), env, "migrate")
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, "schema applied (already current: nothing ran, no table locked)")
}

// TestVersion: `newsfeed version` and `newsfeed --version` print the version,
// the commit and the Go version, alone on stdout, with no configuration.
func TestVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var lines []string
	for _, args := range [][]string{{"version"}, {"--version"}} {
		stdout, stderr, code := runIn(t, dir, nil, args...)
		require.Zero(t, code, stderr)
		require.Empty(t, stderr)
		require.Regexp(t, `^newsfeed \S+ \(commit \S+, go1\.\d+`, stdout, args)
		require.Contains(t, stdout, runtime.Version())
		require.Equal(t, 1, strings.Count(stdout, "\n"), "one line")
		lines = append(lines, stdout)
	}
	require.Equal(t, lines[0], lines[1], "the command and the flag agree")
}
