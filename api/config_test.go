package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
)

func TestConfig(t *testing.T) {
	t.Parallel()

	t.Run("NewRefusesANegativeValueNamingTheField", func(t *testing.T) {
		t.Parallel()
		for field, cfg := range map[string]api.Config{
			"MaxChars":            {MaxChars: -1},
			"FallbackConcurrency": {FallbackConcurrency: -1},
			"PostsPerMinute":      {PostsPerMinute: -1},
			"FollowsPerMinute":    {FollowsPerMinute: -1},
			"StreamHeartbeat":     {StreamHeartbeat: -time.Second},
			"StreamMaxDuration":   {StreamMaxDuration: -time.Hour},
			"StreamCatchUp":       {StreamCatchUp: -time.Minute},
		} {
			cfg.Secret = testSecret
			e, err := api.New(nil, nil, nil, cfg)
			require.Error(t, err, field)
			require.Nil(t, e, field)
			require.Contains(t, err.Error(), "Config."+field+" is -", field)
		}
	})

	t.Run("NewNamesEveryFieldOutOfRange", func(t *testing.T) {
		t.Parallel()
		_, err := api.New(nil, nil, nil, api.Config{Secret: testSecret, MaxChars: -1000, StreamCatchUp: -time.Second})
		require.ErrorContains(t, err, "Config.MaxChars is -1000")
		require.ErrorContains(t, err, "the default 1000")
		require.ErrorContains(t, err, "Config.StreamCatchUp is -1s")
	})

	t.Run("ZeroMeansTheDefaultAndPositiveIsTaken", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []api.Config{
			{Secret: testSecret},
			{
				Secret: testSecret, MaxChars: 1, FallbackConcurrency: 1, PostsPerMinute: 1, FollowsPerMinute: 1,
				StreamHeartbeat: time.Millisecond, StreamMaxDuration: time.Millisecond, StreamCatchUp: time.Millisecond,
			},
		} {
			e, err := api.New(nil, nil, nil, cfg)
			require.NoError(t, err, "%+v", cfg)
			require.NotNil(t, e)
		}
	})
}
