package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// AgePending makes every ticket that group's consumers hold in stream look
// idle for idle, as if its consumer had been silent that long, and returns
// how many it aged. Redis measures idle times on its own clock, which a test
// cannot move: this sets them instead (XCLAIM to the same consumer with IDLE;
// JUSTID, so that no delivery is counted). A take-over test ages the tickets
// it means to be stale far past the claim's min-idle time and leaves the
// others far below it, so that a slow machine cannot make a fresh ticket
// stale, nor a stale one fresh.
func AgePending(t testing.TB, rdb redis.UniversalClient, stream, group string, idle time.Duration) int {
	t.Helper()
	ctx := context.Background()
	pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: group, Start: "-", End: "+", Count: 10_000,
	}).Result()
	if redis.HasErrorPrefix(err, "NOGROUP") {
		return 0
	}
	require.NoError(t, err, "list the pending tickets of %s", stream)
	byConsumer := map[string][]any{}
	for _, p := range pending {
		byConsumer[p.Consumer] = append(byConsumer[p.Consumer], p.ID)
	}
	for consumer, ids := range byConsumer {
		args := append([]any{"XCLAIM", stream, group, consumer, 0}, ids...)
		args = append(args, "IDLE", idle.Milliseconds(), "JUSTID")
		require.NoError(t, rdb.Do(ctx, args...).Err(), "age the tickets of %s in %s", consumer, stream)
	}
	return len(pending)
}
