package app

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// makeVariables returns the simple variables (NAME := value) the Makefile
// sets.
func makeVariables(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "Makefile"))
	require.NoError(t, err)
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+) := (.*)$`).FindAllStringSubmatch(string(raw), -1) {
		vars[m[1]] = strings.TrimSpace(m[2])
	}
	return vars
}

// TestMakeResetTouchesOnlyTheDevDefaults: `make reset` drops the database
// and deletes the Redis keys that `make run` uses with config.yaml's
// defaults — the same server, database, Redis db and key prefix — and
// nothing that a test, the bench or another install keeps elsewhere.
func TestMakeResetTouchesOnlyTheDevDefaults(t *testing.T) {
	t.Parallel()
	vars := makeVariables(t)

	db, err := url.Parse(declared["database.url"].def.(string))
	require.NoError(t, err)
	admin, err := url.Parse(vars["RESET_PG"])
	require.NoError(t, err, "RESET_PG")
	require.Equal(t, db.Host, admin.Host, "make reset's PostgreSQL is database.url's")
	require.Equal(t, db.User.String(), admin.User.String())
	require.Equal(t, "/postgres", admin.Path, "make reset connects to the maintenance database, not the one it drops")
	require.Equal(t, strings.TrimPrefix(db.Path, "/"), vars["RESET_DATABASE"], "make reset drops database.url's database")

	rdb, err := url.Parse(declared["redis.url"].def.(string))
	require.NoError(t, err)
	want := "-h " + rdb.Hostname() + " -p " + rdb.Port() + " -n " + strings.TrimPrefix(rdb.Path, "/")
	require.Equal(t, want, vars["RESET_REDIS"], "make reset's Redis is redis.url's server and db")
	prefix := declared["redis.prefix"].def.(string)
	require.NotEmpty(t, prefix, "an empty prefix would make make reset delete the whole db")
	require.Equal(t, prefix, vars["RESET_REDIS_PREFIX"], "make reset deletes redis.prefix's keys")
}
