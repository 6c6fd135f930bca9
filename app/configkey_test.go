package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfigCheckRefusesWhatTheRolesRefuse: `config check` reads URLs and
// listen addresses as the roles do, without connecting, and exits 1 (main
// exits 1 on any error) naming each wrong key and its source at once.
func TestConfigCheckRefusesWhatTheRolesRefuse(t *testing.T) {
	t.Parallel()
	out, err := runCommand(t, "redis:\n  url: http://127.0.0.1:6379/0\nhttp:\n  addr: notaport\ndatabase:\n  url: not a url\n",
		"config", "check")
	var cerr *ConfigError
	require.True(t, errors.As(err, &cerr), "a *ConfigError: %v", err)
	require.Len(t, cerr.Problems, 3, err.Error())
	for i, want := range []string{
		`database.url: "not a url" is not a PostgreSQL URL or key=value connection string: failed to parse as keyword/value`,
		`redis.url: "http://127.0.0.1:6379/0" is not a redis://, rediss:// or unix:// URL`,
		`http.addr: "notaport" is not a listen address host:port (like :8080): missing port in address`,
	} {
		require.True(t, strings.HasPrefix(cerr.Problems[i], "config file "), cerr.Problems[i])
		require.True(t, strings.HasSuffix(cerr.Problems[i], ": "+want), "%s\nwant …%s", cerr.Problems[i], want)
	}
	require.NotContains(t, out, "configuration valid")

	// The same from the environment; a password is never shown.
	problems := configProblems(t, ConfigSources{Environ: []string{
		"NEWSFEED_DATABASE_URL=mysql://app:hunter2@db/newsfeed", "NEWSFEED_DATABASE_READ_URL=postgres://app:hunter2@db:port/newsfeed",
		"NEWSFEED_REDIS_URL=redis://:hunter2@127.0.0.1:6379/zero", "NEWSFEED_METRICS_ADDR=:metrics",
	}})
	require.Equal(t, []string{
		`NEWSFEED_DATABASE_URL: database.url: "mysql://app:xxxxx@db/newsfeed" is not a postgres:// or postgresql:// URL`,
		`NEWSFEED_DATABASE_READ_URL: database.read_url: "xxxxx" is not a PostgreSQL URL or key=value connection string: invalid port`,
		`NEWSFEED_REDIS_URL: redis.url: "redis://:xxxxx@127.0.0.1:6379/zero" is not a Redis URL: redis: invalid database number: "zero"`,
		`NEWSFEED_METRICS_ADDR: metrics.addr: ":metrics" is not a listen address host:port (like :8080): port "metrics" is not a number from 0 to 65535`,
	}, problems)
}

// TestURLsAndAddresses: what each form of database, Redis and listen
// address the roles take is taken, and what they refuse is refused.
func TestURLsAndAddresses(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{
		{"NEWSFEED_DATABASE_URL=postgresql://app@db:5432/newsfeed?sslmode=require"},
		{"NEWSFEED_DATABASE_URL=host=db user=app password='s3 cret' dbname=newsfeed"},
		{"NEWSFEED_DATABASE_READ_URL=postgres://app@replica/newsfeed"},
		{"NEWSFEED_REDIS_URL=rediss://user:pw@cache:6380/2"},
		{"NEWSFEED_REDIS_URL=unix:///run/redis.sock?db=3"},
		{"NEWSFEED_REDIS_CLUSTER=true", "NEWSFEED_REDIS_URL=redis://h1:7000?addr=h2:7001&addr=h3:7002"},
		{"NEWSFEED_HTTP_ADDR=127.0.0.1:0", "NEWSFEED_METRICS_ADDR=[::1]:9191"},
		{"NEWSFEED_METRICS_ADDR="},
	} {
		_, err := LoadConfig(ConfigSources{Environ: env})
		require.NoError(t, err, "%q", env)
	}
	for env, want := range map[string]string{
		"NEWSFEED_DATABASE_URL=":                 "NEWSFEED_DATABASE_URL: database.url: must not be empty",
		"NEWSFEED_DATABASE_URL=http://db/x":      `NEWSFEED_DATABASE_URL: database.url: "http://db/x" is not a postgres:// or postgresql:// URL`,
		"NEWSFEED_REDIS_URL=":                    "NEWSFEED_REDIS_URL: redis.url: must not be empty",
		"NEWSFEED_REDIS_URL=127.0.0.1:6379":      `NEWSFEED_REDIS_URL: redis.url: "127.0.0.1:6379" is not a redis://, rediss:// or unix:// URL`,
		"NEWSFEED_HTTP_ADDR=":                    `NEWSFEED_HTTP_ADDR: http.addr: "" is not a listen address host:port (like :8080): missing port in address`,
		"NEWSFEED_HTTP_ADDR=:99999":              `NEWSFEED_HTTP_ADDR: http.addr: ":99999" is not a listen address host:port (like :8080): port "99999" is not a number from 0 to 65535`,
		"NEWSFEED_TRACING_ENDPOINT=:4318":        `NEWSFEED_TRACING_ENDPOINT: tracing.endpoint: ":4318" is not an http:// or https:// URL of a collector (http://collector:4318)`,
		"NEWSFEED_DATABASE_READ_URL=redis://h/0": `NEWSFEED_DATABASE_READ_URL: database.read_url: "redis://h/0" is not a postgres:// or postgresql:// URL`,
	} {
		require.Equal(t, []string{want}, configProblems(t, ConfigSources{Environ: []string{env}}), env)
	}
	// A unix socket is no cluster: the problem names where redis.cluster came from.
	require.Equal(t, []string{`NEWSFEED_REDIS_URL: redis.url: "unix:///run/redis.sock" is not a redis:// or rediss:// URL (redis.cluster true from NEWSFEED_REDIS_CLUSTER)`},
		configProblems(t, ConfigSources{Environ: []string{"NEWSFEED_REDIS_CLUSTER=true", "NEWSFEED_REDIS_URL=unix:///run/redis.sock"}}))
}
