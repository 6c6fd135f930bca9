package ratelimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/ratelimit"
)

// Every key the limiter writes is behind the product's prefix and tagged by
// user, and it expires on its own.
func TestKeysAreBehindThePrefix(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.NewRedis(t)
	l := ratelimit.New(rdb, prefix)
	wait, err := l.Allow(t.Context(), "posts", 5, 2)
	require.NoError(t, err)
	require.Zero(t, wait)

	keys, err := rdb.Keys(t.Context(), prefix+"*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{prefix + "rate:posts:{5}"}, keys)
	ttl, err := rdb.TTL(t.Context(), keys[0]).Result()
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.LessOrEqual(t, ttl, time.Minute)
}

func TestAllowCountsPerUserAndAction(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.NewRedis(t)
	l := ratelimit.New(rdb, prefix)
	allow := func(action string, user int64) time.Duration {
		wait, err := l.Allow(t.Context(), action, user, 2)
		require.NoError(t, err)
		return wait
	}
	require.Zero(t, allow("posts", 1))
	require.Zero(t, allow("posts", 1))
	require.InDelta(t, 30*time.Second, allow("posts", 1), float64(2*time.Second), "2 a minute: one every 30 s")
	require.Zero(t, allow("posts", 2), "another user")
	require.Zero(t, allow("follows", 1), "another action")

	wait, err := l.Allow(t.Context(), "posts", 1, 0)
	require.NoError(t, err)
	require.Zero(t, wait, "0 is no limit")
}
