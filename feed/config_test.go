package feed_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/feed"
)

func TestConfig(t *testing.T) {
	t.Parallel()

	t.Run("NewRefusesANegativeValueNamingTheField", func(t *testing.T) {
		t.Parallel()
		for field, cfg := range map[string]feed.Config{
			"MaxLen":             {MaxLen: -1},
			"Backfill":           {Backfill: -1},
			"RebuildWait":        {RebuildWait: -time.Second},
			"RebuildLock":        {RebuildLock: -time.Second},
			"PostTTL":            {PostTTL: -time.Hour},
			"ActiveTTL":          {ActiveTTL: -time.Hour},
			"CelebrityThreshold": {CelebrityThreshold: -1},
			"WaitReplicas":       {WaitReplicas: -1},
			"WaitTimeout":        {WaitTimeout: -time.Second},
			"PushSlots":          {PushSlots: -1},
		} {
			f, err := feed.New(nil, nil, cfg)
			require.Error(t, err, field)
			require.Nil(t, f, field)
			require.Contains(t, err.Error(), "Config."+field+" is -", field)
		}
	})

	t.Run("NewNamesEveryFieldOutOfRange", func(t *testing.T) {
		t.Parallel()
		_, err := feed.New(nil, nil, feed.Config{MaxLen: -800, RebuildWait: -time.Second})
		require.ErrorContains(t, err, "Config.MaxLen is -800")
		require.ErrorContains(t, err, "the default 800")
		require.ErrorContains(t, err, "Config.RebuildWait is -1s")
	})

	t.Run("ZeroMeansTheDefaultAndPositiveIsTaken", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []feed.Config{
			{},
			{
				MaxLen: 1, Backfill: 1, RebuildWait: time.Millisecond, RebuildLock: time.Millisecond,
				PostTTL: time.Millisecond, ActiveTTL: time.Millisecond, CelebrityThreshold: 1,
				WaitReplicas: 1, WaitTimeout: time.Millisecond, PushSlots: 1,
			},
		} {
			f, err := feed.New(nil, nil, cfg)
			require.NoError(t, err, "%+v", cfg)
			require.NotNil(t, f)
			if cfg.MaxLen == 1 {
				got := f.Settings()
				got.Logger = nil
				require.Equal(t, cfg, got, "positive values are kept")
			}
		}
	})

	t.Run("ZeroTakesTheDefaultConstants", func(t *testing.T) {
		t.Parallel()
		f, err := feed.New(nil, nil, feed.Config{})
		require.NoError(t, err)
		got := f.Settings()
		require.NotNil(t, got.Logger)
		got.Logger = nil
		require.Equal(t, feed.Config{
			MaxLen: feed.DefaultMaxLen, RebuildWait: feed.DefaultRebuildWait, RebuildLock: feed.DefaultRebuildLock,
			PostTTL: feed.DefaultPostTTL, ActiveTTL: feed.DefaultActiveTTL, WaitTimeout: feed.DefaultWaitTimeout,
			PushSlots: feed.DefaultPushSlots,
		}, got, "and the fields whose zero means none stay zero")
	})
}
