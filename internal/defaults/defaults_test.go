package defaults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/defaults"
)

func TestNotNegative(t *testing.T) {
	t.Parallel()
	require.NoError(t, defaults.NotNegative("feed.Config", "MaxLen", 0, defaults.The(800)))
	require.NoError(t, defaults.NotNegative("feed.Config", "MaxLen", 1, defaults.The(800)))
	require.EqualError(t, defaults.NotNegative("feed.Config", "MaxLen", -1, defaults.The(800)),
		"feed: Config.MaxLen is -1, out of range: it must be positive, or 0 for the default 800")
	require.EqualError(t, defaults.NotNegative("api.Config", "StreamCatchUp", -time.Second, defaults.The(time.Minute)),
		"api: Config.StreamCatchUp is -1s, out of range: it must be positive, or 0 for the default 1m0s")
	require.EqualError(t, defaults.NotNegative("feed.Config", "Backfill", int64(-2), "none"),
		"feed: Config.Backfill is -2, out of range: it must be positive, or 0 for none")
	require.EqualError(t, defaults.NotNegative("outbox.CleanerConfig", "Retention", -time.Hour, defaults.The(24*time.Hour)),
		"outbox: CleanerConfig.Retention is -1h0m0s, out of range: it must be positive, or 0 for the default 24h0m0s")
}

func TestFill(t *testing.T) {
	t.Parallel()
	zero, set := 0, 3
	defaults.Fill(&zero, 800)
	defaults.Fill(&set, 800)
	require.Equal(t, 800, zero, "zero takes the default")
	require.Equal(t, 3, set, "a value set is kept")
	d := time.Duration(0)
	defaults.Fill(&d, 5*time.Second)
	require.Equal(t, 5*time.Second, d)
}
