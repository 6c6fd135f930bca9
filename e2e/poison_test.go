package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPoisonEvent: an event whose fan-out keeps failing (it names a post that
// does not exist) is retried with backoff and parked dead after
// outbox.max_attempts, while 100 events behind it are delivered; once the
// cause is fixed, `newsfeed outbox retry-dead` delivers it.
func TestPoisonEvent(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_OUTBOX_MAX_ATTEMPTS=3", "NEWSFEED_OUTBOX_BACKOFF_BASE=50ms"))
	all := c.start("all", "--concurrency", "4")
	ctx := context.Background()

	const author, missingPost = 1, 900_000
	followers := c.seedFollowers(author, 100, 20)
	c.markFeedsBuilt(followers)
	var poison int64
	require.NoError(t, c.pool.QueryRow(ctx, `INSERT INTO outbox (event_type, payload) VALUES
		('post.created', jsonb_build_object('post_id', $1::bigint, 'author_id', $2::bigint)) RETURNING id`,
		missingPost, author).Scan(&poison))

	john := all.client(author)
	var good []int64
	for i := range 100 {
		good = append(good, john.post("behind the poison "+strconv.Itoa(i)).ID)
	}
	require.Eventually(t, func() bool { return c.outboxStatus(poison) == "dead" }, 60*time.Second, 20*time.Millisecond)
	c.waitOutboxDrainedExcept(poison, 60*time.Second)
	for _, id := range good {
		require.Equal(t, len(followers), c.feedsHolding(followers, id), "post %d", id)
	}

	var failures int
	var lastError string
	require.NoError(t, c.pool.QueryRow(ctx, "SELECT failures, last_error FROM outbox WHERE id = $1", poison).
		Scan(&failures, &lastError))
	require.Equal(t, 3, failures)
	require.Contains(t, lastError, "does not exist")
	require.Eventually(t, func() bool { return all.metric("newsfeed_outbox_dead") == 1 }, 10*time.Second, 100*time.Millisecond)
	out, err := c.run("outbox", "stats")
	require.NoError(t, err)
	var stats map[string]float64
	require.NoError(t, json.Unmarshal([]byte(out), &stats), out)
	require.Equal(t, 1.0, stats["dead"])
	// The operator sees which event died, of what, and when.
	out, err = c.run("outbox", "dead", "--json")
	require.NoError(t, err)
	var dead struct {
		Total  int
		Events []struct {
			ID        int64
			Aggregate struct {
				Type string
				ID   int64
			}
			Failures  int
			LastError string     `json:"last_error"`
			DiedAt    *time.Time `json:"died_at"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &dead), out)
	require.Equal(t, 1, dead.Total)
	require.Equal(t, poison, dead.Events[0].ID)
	require.Equal(t, "post", dead.Events[0].Aggregate.Type)
	require.EqualValues(t, missingPost, dead.Events[0].Aggregate.ID)
	require.Equal(t, 3, dead.Events[0].Failures)
	require.Equal(t, lastError, dead.Events[0].LastError)
	require.NotNil(t, dead.Events[0].DiedAt)
	require.WithinDuration(t, time.Now(), *dead.Events[0].DiedAt, time.Minute)

	// Fix the cause: the post is restored. Then the operator retries.
	_, err = c.pool.Exec(ctx, `INSERT INTO posts (id, author_id, body) VALUES ($1, $2, 'restored')`, missingPost, author)
	require.NoError(t, err)
	out, err = c.run("outbox", "retry-dead", "--id", strconv.FormatInt(poison, 10))
	require.NoError(t, err)
	require.Equal(t, "1 dead event(s) made pending again", strings.TrimSpace(out))
	c.waitOutboxDrained(60 * time.Second)
	require.Equal(t, len(followers), c.feedsHolding(followers, missingPost))
	items := all.client(followers[0]).feed()
	require.Len(t, items, 101)
	require.Equal(t, int64(missingPost), items[0].ID)
	require.Eventually(t, func() bool { return all.metric("newsfeed_outbox_dead") == 0 }, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, 0, all.stop())
}
