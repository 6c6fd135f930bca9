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
	d, err := l.Allow(t.Context(), "posts", 5, 2)
	require.NoError(t, err)
	require.True(t, d.Allowed)

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
	allow := func(action string, user int64) ratelimit.Decision {
		d, err := l.Allow(t.Context(), action, user, 2)
		require.NoError(t, err)
		return d
	}
	require.True(t, allow("posts", 1).Allowed)
	require.True(t, allow("posts", 1).Allowed)
	over := allow("posts", 1)
	require.False(t, over.Allowed)
	require.InDelta(t, 30*time.Second, over.RetryAfter, float64(2*time.Second), "2 a minute: one every 30 s")
	require.True(t, allow("posts", 2).Allowed, "another user")
	require.True(t, allow("follows", 1).Allowed, "another action")

	d, err := l.Allow(t.Context(), "posts", 1, 0)
	require.NoError(t, err)
	require.True(t, d.Allowed, "0 is no limit")
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{
		0:                      1,
		time.Millisecond:       1,
		time.Second:            1,
		time.Second + 1:        2,
		20 * time.Second:       20,
		59*time.Second + 999e6: 60,
	} {
		require.Equal(t, want, ratelimit.RetryAfterSeconds(d), "%s", d)
	}
}
