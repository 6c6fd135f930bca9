package health_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/health"
)

// silentDependency answers pings until it is made silent; then a ping waits
// for its context, as a call to a server behind a silent partition does.
type silentDependency struct {
	mu     sync.Mutex
	silent bool
}

func (d *silentDependency) ping(ctx context.Context) error {
	d.mu.Lock()
	silent := d.silent
	d.mu.Unlock()
	if !silent {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (d *silentDependency) setSilent(silent bool) {
	d.mu.Lock()
	d.silent = silent
	d.mu.Unlock()
}

// TestSilentDependencyNoticed: a dependency that stops answering without
// refusing is known down within 2 s by the watch's own pings, with nothing
// failing on it meanwhile; a readiness check says so within the ping
// timeout, even while a round of the watch's is waiting on the silence; and
// its return is noticed the same way.
func TestSilentDependencyNoticed(t *testing.T) {
	t.Parallel()
	dep := &silentDependency{}
	w := health.NewWatch(zap.NewNop(), 0, 0, health.Dependency{Name: health.Redis, Key: "redis.url", Ping: dep.ping})
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Go(func() { _ = w.Run(ctx) })
	t.Cleanup(func() { cancel(); run.Wait() })
	require.NoError(t, w.Check(ctx))

	dep.setSilent(true)
	silent := time.Now()
	require.Eventually(t, func() bool { return w.IsDown(health.Redis) }, 2*time.Second, 10*time.Millisecond,
		"known down within 2 s, by the watch's pings alone")
	t.Logf("known down %s after it went silent", time.Since(silent).Round(time.Millisecond))

	start := time.Now()
	var down *health.DownError
	require.ErrorAs(t, w.Check(ctx), &down)
	require.Less(t, time.Since(start), health.DefaultTimeout+500*time.Millisecond, "a check is one ping's timeout")

	dep.setSilent(false)
	require.Eventually(t, func() bool { return !w.IsDown(health.Redis) }, 2*time.Second, 10*time.Millisecond)
}

// TestIsOutage: what a dependency failing looks like, from the drivers and
// the network, against what a bug looks like.
func TestIsOutage(t *testing.T) {
	t.Parallel()
	require.True(t, health.IsOutage(context.DeadlineExceeded))
	require.True(t, health.IsOutage(&net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}))
	require.True(t, health.IsOutage(&health.DownError{Name: health.PostgreSQL}))
	require.False(t, health.IsOutage(nil))
	require.False(t, health.IsOutage(context.Canceled), "the caller gave up: no outage")
	require.False(t, health.IsOutage(errTest))
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var errTest = testError("a bug")

type testError string

func (e testError) Error() string { return string(e) }
