package sticky_test

import (
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/sticky"
)

func TestPositions(t *testing.T) {
	t.Parallel()
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	p := sticky.New(rdb, prefix)
	ctx := t.Context()

	t.Run("NothingRecorded", func(t *testing.T) {
		_, found, err := p.Get(ctx, 1)
		require.NoError(t, err)
		require.False(t, found)
	})

	t.Run("RecordedBehindThePrefixTaggedByUserWithATTL", func(t *testing.T) {
		require.NoError(t, p.Record(ctx, 2, 0x16B374D848))
		lsn, found, err := p.Get(ctx, 2)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, int64(0x16B374D848), lsn)

		require.Equal(t, prefix+"lsn:{2}", sticky.Key(prefix, 2))
		ttl, err := rdb.PTTL(ctx, sticky.Key(prefix, 2)).Result()
		require.NoError(t, err)
		require.Positive(t, ttl)
		require.LessOrEqual(t, ttl, sticky.TTL)
	})

	t.Run("KeepsTheGreaterPosition", func(t *testing.T) {
		// Two writes of one user that record in the other order than they
		// committed, with positions that differ past a double's precision.
		const high, low = math.MaxInt64, math.MaxInt64 - 1
		require.NoError(t, p.Record(ctx, 3, high))
		require.NoError(t, p.Record(ctx, 3, low))
		lsn, _, err := p.Get(ctx, 3)
		require.NoError(t, err)
		require.Equal(t, int64(high), lsn)

		require.NoError(t, p.Record(ctx, 4, 9))
		require.NoError(t, p.Record(ctx, 4, 10), "10 > 9, though \"10\" < \"9\" as strings")
		lsn, _, err = p.Get(ctx, 4)
		require.NoError(t, err)
		require.Equal(t, int64(10), lsn)
	})

	t.Run("ALowerPositionStillRestartsTheTTL", func(t *testing.T) {
		key := sticky.Key(prefix, 5)
		require.NoError(t, p.Record(ctx, 5, 100))
		require.NoError(t, rdb.PExpire(ctx, key, time.Second).Err())
		require.NoError(t, p.Record(ctx, 5, 50))
		ttl, err := rdb.PTTL(ctx, key).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, time.Second)
		lsn, _, err := p.Get(ctx, 5)
		require.NoError(t, err)
		require.Equal(t, int64(100), lsn)
	})

	t.Run("RedisDown", func(t *testing.T) {
		t.Parallel()
		dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { _ = dead.Close() })
		down := sticky.New(dead, prefix)
		_, _, err := down.Get(ctx, 1)
		require.Error(t, err)
		require.Error(t, down.Record(ctx, 1, 1))
	})
}
