package health_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/newsfeed/newsfeed/internal/health"
	"github.com/newsfeed/newsfeed/internal/probe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// privateRedis is a redis-server of the test's own, which it stops and
// starts again: the shared one is never broken.
type privateRedis struct {
	t    *testing.T
	addr string
	cmd  *exec.Cmd
}

func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	addr, err := probe.FreeAddr()
	require.NoError(t, err)
	r := &privateRedis{t: t, addr: addr}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *privateRedis) start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
	require.NoError(r.t, r.cmd.Start())
	rdb := redis.NewClient(&redis.Options{Addr: r.addr})
	defer rdb.Close()
	require.Eventually(r.t, func() bool { return rdb.Ping(context.Background()).Err() == nil },
		10*time.Second, 10*time.Millisecond, "the private Redis answers")
}

func (r *privateRedis) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// outageLines returns the watch's lines about its dependency: going down
// and coming back.
func outageLines(logs *observer.ObservedLogs) (down, up []observer.LoggedEntry) {
	for _, e := range logs.All() {
		switch e.Message {
		case "Redis is unreachable: what needs it fails, and is retried, until it answers":
			down = append(down, e)
		case "Redis answers again":
			up = append(up, e)
		}
	}
	return down, up
}

// TestOneLinePerTransition: a Redis that stops answering while many
// requests fail on it is logged once when it goes and once when it is back,
// whatever the number of failures; the failures log at debug, each; none
// of it with a stack trace.
func TestOneLinePerTransition(t *testing.T) {
	r := startPrivateRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	w := health.NewWatch(log, 50*time.Millisecond, time.Second,
		health.Dependency{Name: "Redis", Key: "redis.url", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Go(func() { _ = w.Run(ctx) })
	t.Cleanup(func() { cancel(); run.Wait() })

	require.NoError(t, w.Check(ctx))
	require.False(t, w.Explained(ctx, errors.New("a bug, not an outage")), "everything answers: not explained")

	r.stop()
	// Many requests fail at once, and again and again, as a service under
	// load does.
	var failing sync.WaitGroup
	for range 50 {
		failing.Go(func() {
			for range 5 {
				err := rdb.Get(ctx, "k").Err()
				require.Error(t, err)
				health.Log(ctx, w, log, "request failed", err)
			}
		})
	}
	failing.Wait()
	require.True(t, w.Down())
	var down *health.DownError
	require.ErrorAs(t, w.Check(ctx), &down)
	require.Equal(t, "Redis", down.Name)

	r.start()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, up := outageLines(logs)
		require.NotEmpty(c, up, "the return is logged without any request")
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, w.Check(ctx))

	goneLines, backLines := outageLines(logs)
	require.Len(t, goneLines, 1, "one line when it went")
	require.Len(t, backLines, 1, "one line when it came back")
	require.Equal(t, zapcore.WarnLevel, goneLines[0].Level)
	require.Equal(t, "redis.url", goneLines[0].ContextMap()["key"])
	require.Contains(t, backLines[0].ContextMap(), "down_for")
	failures := logs.FilterMessage("request failed").All()
	require.Len(t, failures, 250, "every failure is still there to read, at debug")
	for _, e := range failures {
		require.Equal(t, zapcore.DebugLevel, e.Level, "explained by the outage")
	}
	for _, e := range logs.All() {
		require.Empty(t, e.Stack, "no stack trace: %s", e.Message)
	}

	// After the outage, a failure nothing explains is a warning again…
	health.Log(ctx, w, log, "query failed", errors.New("syntax error"))
	require.Equal(t, zapcore.WarnLevel, logs.FilterMessage("query failed").All()[0].Level)
	// …but a connection broken during the outage, met right after it, is
	// the outage's (a blocking read's connection, a pool's idle one).
	health.Log(ctx, w, log, "reading failed", fmt.Errorf("read tickets: %w", io.EOF))
	require.Equal(t, zapcore.DebugLevel, logs.FilterMessage("reading failed").All()[0].Level)
}

func TestCancelledIsNoOutage(t *testing.T) {
	t.Parallel()
	pinged := false
	w := health.NewWatch(zap.NewNop(), 0, 0, health.Dependency{Name: "PostgreSQL", Ping: func(context.Context) error {
		pinged = true
		return nil
	}})
	require.False(t, w.Explained(context.Background(), context.Canceled))
	require.False(t, w.Explained(context.Background(), nil))
	require.False(t, pinged, "nothing to explain: no ping")
}

// TestIsDown: a dependency is down from the round of pings that logged it
// going until the one that logged it back, and the others are not.
func TestIsDown(t *testing.T) {
	t.Parallel()
	var redisErr error
	var mu sync.Mutex
	w := health.NewWatch(zap.NewNop(), 0, 0,
		health.Dependency{Name: health.PostgreSQL, Ping: func(context.Context) error { return nil }},
		health.Dependency{Name: health.Redis, Ping: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			return redisErr
		}})
	require.NoError(t, w.Check(t.Context()))
	require.False(t, w.IsDown(health.Redis))

	mu.Lock()
	redisErr = errors.New("connection refused")
	mu.Unlock()
	require.False(t, w.IsDown(health.Redis), "not known before a ping says so")
	require.Error(t, w.Check(t.Context()))
	require.True(t, w.IsDown(health.Redis))
	require.False(t, w.IsDown(health.PostgreSQL))
	require.False(t, w.IsDown("Memcached"), "a dependency not watched is never known down")

	mu.Lock()
	redisErr = nil
	mu.Unlock()
	require.NoError(t, w.Check(t.Context()))
	require.False(t, w.IsDown(health.Redis))
}

// TestFailureRightAfterARound: a dependency that goes down a moment after
// a round of pings found it up is still found down by the failure it
// causes; the round before the failure cannot speak for it (a request
// logged at error while the outage was being logged once, in CI).
func TestFailureRightAfterARound(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	w := health.NewWatch(zap.NewNop(), time.Hour, time.Second, health.Dependency{Name: "PostgreSQL", Ping: func(context.Context) error {
		if down.Load() {
			return io.ErrUnexpectedEOF
		}
		return nil
	}})
	ctx := context.Background()
	require.False(t, w.Explained(ctx, errors.New("a bug")), "a round finds it up")
	down.Store(true)
	require.True(t, w.Explained(ctx, fmt.Errorf("create post: %w", io.ErrUnexpectedEOF)))
}
