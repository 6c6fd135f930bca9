package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/outbox"
)

func TestConfigRefusesNegativeValues(t *testing.T) {
	t.Parallel()

	t.Run("Dispatcher", func(t *testing.T) {
		t.Parallel()
		for field, cfg := range map[string]outbox.Config{
			"Config.BatchSize":      {BatchSize: -1},
			"Config.PollInterval":   {PollInterval: -time.Millisecond},
			"Config.Lease":          {Lease: -time.Second},
			"Config.RedeliverAfter": {RedeliverAfter: -time.Minute},
			"Config.MaxAttempts":    {MaxAttempts: -3},
			"Config.Backoff.Base":   {Backoff: backoff.Schedule{Base: -time.Second, Max: time.Hour}},
			"Config.Backoff.Max":    {Backoff: backoff.Schedule{Base: time.Second, Max: -time.Hour}},
			"Config.PassTimeout":    {PassTimeout: -time.Second},
		} {
			d, err := outbox.NewDispatcher(nil, nil, cfg)
			require.ErrorContains(t, err, "outbox: "+field+" is -")
			require.ErrorContains(t, err, "out of range")
			require.Nil(t, d)
		}
	})

	t.Run("Cleaner", func(t *testing.T) {
		t.Parallel()
		for field, cfg := range map[string]outbox.CleanerConfig{
			"CleanerConfig.Retention": {Retention: -time.Hour},
			"CleanerConfig.Interval":  {Interval: -time.Minute},
			"CleanerConfig.Timeout":   {Timeout: -time.Second},
			"CleanerConfig.BatchSize": {BatchSize: -1000},
		} {
			c, err := outbox.NewCleaner(nil, cfg)
			require.ErrorContains(t, err, "outbox: "+field+" is -")
			require.ErrorContains(t, err, "out of range")
			require.Nil(t, c)
		}
	})

	t.Run("ZeroTakesTheDefaults", func(t *testing.T) {
		t.Parallel()
		d, err := outbox.NewDispatcher(nil, nil, outbox.Config{})
		require.NoError(t, err)
		require.NotNil(t, d)
		c, err := outbox.NewCleaner(nil, outbox.CleanerConfig{})
		require.NoError(t, err)
		require.NotNil(t, c)
	})
}
