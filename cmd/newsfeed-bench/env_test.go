package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/app"
	"github.com/newsfeed/newsfeed/bench"
)

// TestWorkerEnv: a worker process's environment carries every key of the
// parent's effective configuration, the bench's overrides, and no NEWSFEED_
// variable of the parent's own; read back with no file, it is the same
// configuration.
func TestWorkerEnv(t *testing.T) {
	cfg, err := app.LoadConfig(app.ConfigSources{Environ: []string{
		"NEWSFEED_FEED_MAX_LEN=123", "NEWSFEED_OUTBOX_LEASE=7s", "NEWSFEED_OUTBOX_NOTIFY=false",
		"NEWSFEED_METRICS_ADDR=", "NEWSFEED_AUTH_SECRET=s3cret",
	}, Flags: benchOverrides()})
	require.NoError(t, err)
	cfg.Redis.Prefix = bench.Prefix
	cfg.Fanout.CelebrityThreshold = 1 << 60
	cfg.Log.Level = "warn"

	env := workerEnv([]string{"PATH=/bin", "NEWSFEED_FEED_MAX_LEN=999", "NEWSFEED_SOMETHING=else"}, cfg)
	require.Contains(t, env, "PATH=/bin")
	require.NotContains(t, env, "NEWSFEED_FEED_MAX_LEN=999")
	require.NotContains(t, env, "NEWSFEED_SOMETHING=else")
	require.Contains(t, env, "NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=0")
	require.Contains(t, env, "NEWSFEED_RATELIMIT_FOLLOWS_PER_MINUTE=0")
	names := map[string]bool{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		require.False(t, names[name], "%s twice", name)
		names[name] = true
	}
	for _, key := range app.KnownKeys() {
		require.True(t, names["NEWSFEED_"+strings.ToUpper(strings.ReplaceAll(key, ".", "_"))], key)
	}

	back, err := app.LoadConfig(app.ConfigSources{Environ: env})
	require.NoError(t, err)
	require.Equal(t, cfg, back)
}
