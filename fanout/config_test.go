package fanout_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/internal/backoff"
)

func TestConfig(t *testing.T) {
	t.Parallel()

	t.Run("NewRefusesANegativeValueNamingTheField", func(t *testing.T) {
		t.Parallel()
		for field, cfg := range map[string]fanout.Config{
			"Concurrency":     {Concurrency: -1},
			"PageSize":        {PageSize: -1},
			"ChunkSize":       {ChunkSize: -1},
			"ClaimIdle":       {ClaimIdle: -time.Second},
			"ClaimInterval":   {ClaimInterval: -time.Second},
			"MaxDeliveries":   {MaxDeliveries: -1},
			"MaxAttempts":     {MaxAttempts: -1},
			"Backoff.Base":    {Backoff: backoff.Schedule{Base: -time.Second, Max: time.Hour}},
			"Backoff.Max":     {Backoff: backoff.Schedule{Base: time.Second, Max: -time.Hour}},
			"RedeliverAfter":  {RedeliverAfter: -time.Minute},
			"ShutdownTimeout": {ShutdownTimeout: -time.Second},
		} {
			w, err := fanout.New(nil, nil, nil, nil, cfg)
			require.Error(t, err, field)
			require.Nil(t, w, field)
			require.Contains(t, err.Error(), "Config."+field+" is -", field)
		}
	})

	t.Run("NewNamesEveryFieldOutOfRange", func(t *testing.T) {
		t.Parallel()
		_, err := fanout.New(nil, nil, nil, nil, fanout.Config{Concurrency: -1, ChunkSize: -5000})
		require.ErrorContains(t, err, "Config.Concurrency is -1")
		require.ErrorContains(t, err, "Config.ChunkSize is -5000")
	})

	t.Run("ZeroMeansTheDefaultAndPositiveIsTaken", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []fanout.Config{
			{},
			{
				Concurrency: 1, PageSize: 1, ChunkSize: 1, ClaimIdle: time.Millisecond, ClaimInterval: time.Millisecond,
				MaxDeliveries: 1, MaxAttempts: 1, Backoff: backoff.Schedule{Base: time.Millisecond, Max: time.Millisecond},
				RedeliverAfter: time.Millisecond, ShutdownTimeout: time.Millisecond,
			},
		} {
			w, err := fanout.New(nil, nil, nil, nil, cfg)
			require.NoError(t, err, "%+v", cfg)
			require.NotNil(t, w)
		}
	})
}
