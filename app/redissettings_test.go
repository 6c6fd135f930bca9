package app

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/probe"
)

// privateRedis starts a redis-server of the test's own with args (the
// shared one's settings must not change under other tests) and returns a
// client to it; both go when the test ends.
func privateRedis(t *testing.T, args ...string) *redis.Client {
	t.Helper()
	addr, err := probe.FreeAddr()
	require.NoError(t, err)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	cmd := exec.Command("redis-server", append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, args...)...)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	require.Eventually(t, func() bool { return rdb.Ping(context.Background()).Err() == nil }, 10*time.Second, 20*time.Millisecond)
	return rdb
}

// On a Redis that keeps hashes as listpacks only up to 128 fields — the
// following hash of a reader who follows more would take ~60 bytes a
// followee — the start-up check warns once, names the setting, the node and
// the fix, and sets the gauge; with redis.configure it raises the setting,
// and the next check finds nothing to say.
func TestRedisSettingsCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := privateRedis(t, "--hash-max-listpack-entries", "128")
	core, logs := observer.New(zap.InfoLevel)
	gauge := redisSettingsGauge(prometheus.NewRegistry())

	checks, err := feed.CheckServer(ctx, rdb, false)
	require.NoError(t, err)
	reportRedisSettings(zap.New(core), gauge, checks)
	warnings := logs.FilterLevelExact(zap.WarnLevel).All()
	require.Len(t, warnings, 1, "one warning per setting")
	fields := warnings[0].ContextMap()
	require.Equal(t, "hash-max-listpack-entries", fields["setting"])
	require.EqualValues(t, 128, fields["have"])
	require.EqualValues(t, 1024, fields["want"])
	require.Equal(t, rdb.Options().Addr, fields["nodes"])
	require.Contains(t, warnings[0].Message, "redis.configure: true")
	require.Equal(t, 1.0, testutil.ToFloat64(gauge.WithLabelValues("hash-max-listpack-entries")))

	checks, err = feed.CheckServer(ctx, rdb, true) // redis.configure: true
	require.NoError(t, err)
	require.True(t, checks[0].Applied)
	require.Equal(t, "1024", rdb.ConfigGet(ctx, "hash-max-listpack-entries").Val()["hash-max-listpack-entries"])
	logs.TakeAll()
	reportRedisSettings(zap.New(core), gauge, checks)
	require.Empty(t, logs.FilterLevelExact(zap.WarnLevel).All())
	require.Equal(t, 0.0, testutil.ToFloat64(gauge.WithLabelValues("hash-max-listpack-entries")))

	checks, err = feed.CheckServer(ctx, rdb, false)
	require.NoError(t, err)
	require.False(t, checks[0].Expensive(), "a compact server is left alone")
}

// A Redis that does not answer is an error, so the caller tries again
// later; it is not reported as a compact server.
func TestRedisSettingsCheckUnreachable(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	_, err := feed.CheckServer(context.Background(), rdb, false)
	require.Error(t, err)
}
