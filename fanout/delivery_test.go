package fanout_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
)

// histogramSum is the sum of the observations of histogram name.
func (b *testBundle) histogramSum(t tb, name string) float64 {
	t.Helper()
	families, err := b.reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() == name {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
			}
			return sum
		}
	}
	return 0
}

// redeliver publishes the outbox row's event again, as a redelivery after a
// lost acknowledgement, a takeover or a republication does.
func (b *testBundle) redeliver(t *testing.T, r outboxRow, attempt int) {
	t.Helper()
	b.publish(t, domain.Event{ID: r.ID, Type: r.Type, Payload: r.Payload, Attempt: attempt, CreatedAt: time.Now()})
}

// waitTickets waits until n tickets of typ ended with outcome and none is pending.
func (b *testBundle) waitTickets(t *testing.T, typ, outcome string, n int) {
	t.Helper()
	eventually(t, func(c *assert.CollectT) {
		require.EqualValues(c, n, b.tickets(c, typ, outcome))
		require.Zero(c, b.pending(c))
	})
}

func TestDeliveryMetric(t *testing.T) {
	t.Parallel()

	t.Run("RedeliveredPostCreatedIsObservedOnce", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 4)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)
		run(t, w)
		postID := b.post(t, author)
		b.deliver(t)
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"))

		// The same post.created again: the fan-out runs again (it changes
		// nothing), but the post was delivered once.
		r := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
		b.redeliver(t, r, 2)
		b.waitTickets(t, domain.PostCreated, "done", 2)
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"), "a redelivery observed the delivery again")
		for _, u := range followers {
			require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
		}
		b.requireQueueEmpty(t)
	})

	t.Run("LatencyIsMeasuredOnTheDatabaseClock", func(t *testing.T) {
		t.Parallel()
		// The post committed an hour ago by the database's clock; the
		// ticket's timestamp (what a worker's clock would compare with)
		// says just now. The latency is the database's.
		w, b := setup(t, fanout.Config{}, feed.Config{})
		const author, follower = int64(1), int64(2)
		b.follow(t, author, []int64{follower})
		b.buildFeeds(t, []int64{follower})
		postID := b.post(t, author)
		events := b.claim(t, 1)
		_, err := b.pool.Exec(t.Context(), `UPDATE outbox SET created_at = now() - interval '1 hour' WHERE id = $1`, events[0].ID)
		require.NoError(t, err)
		events[0].CreatedAt = time.Now()
		b.publish(t, events[0])

		run(t, w)
		b.waitTickets(t, domain.PostCreated, "done", 1)
		var upper float64
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`SELECT extract(epoch FROM now() - created_at)::float8 FROM outbox WHERE id = $1`, events[0].ID).Scan(&upper))
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"))
		sum := b.histogramSum(t, "newsfeed_delivery_seconds")
		require.GreaterOrEqual(t, sum, 3600.0, "the latency is the database's now() - created_at")
		require.LessOrEqual(t, sum, upper)
		require.Equal(t, []int64{postID}, b.feedPosts(t, follower))
	})
}
