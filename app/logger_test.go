package app

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// iso8601UTC is a log line's time: ISO 8601, UTC, milliseconds.
var iso8601UTC = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// TestLogFormats: both formats write ISO-8601 UTC times, and an error line
// has no stack trace (zap's production configuration adds one to every
// error: a 503 during an outage used to log forty lines of stack).
func TestLogFormats(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "console"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(ConfigSources{Environ: []string{"NEWSFEED_LOG_FORMAT=" + format}})
			require.NoError(t, err)
			zc, err := loggerConfig(cfg)
			require.NoError(t, err)
			out := filepath.Join(t.TempDir(), "log")
			zc.OutputPaths = []string{out}
			log, err := zc.Build()
			require.NoError(t, err)
			log.Error("request failed", zap.Error(errors.New("PostgreSQL is down")))
			require.NoError(t, log.Sync())
			raw, err := os.ReadFile(out)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
			require.Len(t, lines, 1, "one line, no stack trace: %s", raw)
			var ts string
			if format == "json" {
				var line map[string]any
				require.NoError(t, json.Unmarshal([]byte(lines[0]), &line))
				ts, _ = line["ts"].(string)
				require.NotContains(t, line, "stacktrace")
			} else {
				ts, _, _ = strings.Cut(lines[0], "\t")
			}
			require.Regexp(t, iso8601UTC, ts)
			at, err := time.Parse(time.RFC3339, ts)
			require.NoError(t, err)
			require.WithinDuration(t, time.Now(), at, time.Hour, "the time of the line, in UTC")
		})
	}
}

// TestBuildInfoOnEveryRole: every role's /metrics has newsfeed_build_info
// with the version, commit and Go version that `newsfeed version` prints.
func TestBuildInfoOnEveryRole(t *testing.T) {
	_, prefix := testenv.NewRedis(t)
	env := map[string]string{
		"NEWSFEED_DATABASE_URL": testenv.NewDatabaseURL(t),
		"NEWSFEED_REDIS_URL":    testenv.RedisURL(),
		"NEWSFEED_REDIS_PREFIX": prefix,
	}
	b := ReadBuildInfo()
	want := `newsfeed_build_info{commit="` + b.Commit + `",goversion="` + runtime.Version() + `",version="` + b.Version + `"} 1`
	for _, role := range []Role{RoleServe, RoleDispatch, RoleWork} {
		r := startRole(t, role, env, nil)
		rec := httptest.NewRecorder()
		r.sys.opsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, strings.Split(rec.Body.String(), "\n"), want, "%s", role)
	}
}
