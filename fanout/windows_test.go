package fanout_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/queue"
	"github.com/newsfeed/newsfeed/store"
)

// hookedOutbox is the real store with hooks run before some outbox calls
// (a hook's error is returned instead of the call's) and counts of them.
type hookedOutbox struct {
	*store.DB
	beforeFinish func(ctx context.Context, id int64) error
	beforeFail   func(ctx context.Context, id int64) error
	beforeBury   func(ctx context.Context, id int64) error

	finishes, fails, buries atomic.Int64
	mu                      sync.Mutex
	retries                 []time.Duration
}

func (o *hookedOutbox) FinishEvent(ctx context.Context, id int64) (bool, time.Duration, error) {
	o.finishes.Add(1)
	if o.beforeFinish != nil {
		if err := o.beforeFinish(ctx, id); err != nil {
			return false, 0, err
		}
	}
	return o.DB.FinishEvent(ctx, id)
}

func (o *hookedOutbox) Fail(ctx context.Context, id int64, maxAttempts int, retryIn time.Duration, cause string) (bool, error) {
	o.fails.Add(1)
	o.mu.Lock()
	o.retries = append(o.retries, retryIn)
	o.mu.Unlock()
	if o.beforeFail != nil {
		if err := o.beforeFail(ctx, id); err != nil {
			return false, err
		}
	}
	return o.DB.Fail(ctx, id, maxAttempts, retryIn, cause)
}

func (o *hookedOutbox) Bury(ctx context.Context, id int64, cause string) error {
	o.buries.Add(1)
	if o.beforeBury != nil {
		if err := o.beforeBury(ctx, id); err != nil {
			return err
		}
	}
	return o.DB.Bury(ctx, id, cause)
}

// failRetries returns the retryIn of every Fail call so far.
func (o *hookedOutbox) failRetries() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Duration(nil), o.retries...)
}

// hookedQueue is the real queue with hooks run before some calls.
type hookedQueue struct {
	*queue.Queue
	beforeRead       func(ctx context.Context) error
	beforeAck        func(ctx context.Context, messageID string) error
	beforeDeadLetter func(ctx context.Context) error

	reads, acks, deadLetters atomic.Int64
}

func (q *hookedQueue) Read(ctx context.Context, consumer string, count int, block time.Duration) ([]domain.Delivery, error) {
	q.reads.Add(1)
	if q.beforeRead != nil {
		if err := q.beforeRead(ctx); err != nil {
			return nil, err
		}
	}
	return q.Queue.Read(ctx, consumer, count, block)
}

func (q *hookedQueue) Ack(ctx context.Context, messageID string) error {
	q.acks.Add(1)
	if q.beforeAck != nil {
		if err := q.beforeAck(ctx, messageID); err != nil {
			return err
		}
	}
	return q.Queue.Ack(ctx, messageID)
}

func (q *hookedQueue) DeadLetter(ctx context.Context, t domain.Delivery, cause string) error {
	q.deadLetters.Add(1)
	if q.beforeDeadLetter != nil {
		if err := q.beforeDeadLetter(ctx); err != nil {
			return err
		}
	}
	return q.Queue.DeadLetter(ctx, t, cause)
}

// failTimes returns a hook that fails its first n calls.
func failTimes(n int64) func() error {
	var calls atomic.Int64
	return func() error {
		if calls.Add(1) <= n {
			return errOnFire
		}
		return nil
	}
}

// postRow is the post.created outbox row of postID.
func (b *testBundle) postRow(t *testing.T, postID int64) outboxRow {
	t.Helper()
	return b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
}

// requireOncePerFollower checks that each follower's feed holds the post
// once, and nothing else.
func (b *testBundle) requireOncePerFollower(t *testing.T, followers []int64, postID int64) {
	t.Helper()
	for _, u := range followers {
		require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
	}
}

func TestAtLeastOnce(t *testing.T) {
	t.Parallel()
	const author = int64(1)

	// withFollowers sets up an author whose followers have feeds.
	withFollowers := func(t *testing.T) (*testBundle, []int64) {
		t.Helper()
		_, b := setup(t, fanout.Config{}, feed.Config{})
		followers := userRange(2, 11)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)
		return b, followers
	}

	t.Run("FinishFailingAfterThePushLeavesTheTicketForRedelivery", func(t *testing.T) {
		t.Parallel()
		b, followers := withFollowers(t)
		ob := &hookedOutbox{DB: b.db, beforeFinish: func(context.Context, int64) error { return errOnFire }}
		first := run(t, b.newOutboxWorker(t, b.feeds, ob, fanout.Config{}))
		postID := b.post(t, author)
		b.dispatch(t)
		eventually(t, func(c *assert.CollectT) { require.EqualValues(c, 1, ob.finishes.Load()) })
		first.stop(t)

		// The feeds have the post, the outbox does not know, and the
		// ticket is still there for another worker.
		b.requireOncePerFollower(t, followers, postID)
		require.Equal(t, "published", b.postRow(t, postID).Status)
		require.EqualValues(t, 1, b.pending(t), "the ticket was acknowledged")
		require.Zero(t, b.tickets(t, domain.PostCreated, "done"))
		require.Zero(t, b.metric(t, "newsfeed_delivery_seconds"))

		require.Equal(t, 1, b.ageTickets(t))
		run(t, b.newWorker(t, b.feeds, fanout.Config{ClaimIdle: takeoverIdle}))
		b.deliver(t)
		b.requireOncePerFollower(t, followers, postID)
		require.EqualValues(t, len(followers), b.metric(t, "newsfeed_fanout_entries_total"), "the second push added nothing")
		require.EqualValues(t, 1, b.tickets(t, domain.PostCreated, "done"))
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"))
		require.Equal(t, "done", b.postRow(t, postID).Status)
		b.requireQueueEmpty(t)
	})

	t.Run("FailFailingLeavesTheTicketForRedelivery", func(t *testing.T) {
		t.Parallel()
		b, followers := withFollowers(t)
		pushFails := failTimes(1)
		feeds := &hookedFeeds{Feeds: b.feeds, beforePush: func(context.Context) error { return pushFails() }}
		ob := &hookedOutbox{DB: b.db, beforeFail: func(context.Context, int64) error { return errOnFire }}
		first := run(t, b.newOutboxWorker(t, feeds, ob, fanout.Config{}))
		postID := b.post(t, author)
		b.dispatch(t)
		eventually(t, func(c *assert.CollectT) { require.EqualValues(c, 1, ob.fails.Load()) })
		first.stop(t)

		r := b.postRow(t, postID)
		require.Equal(t, "published", r.Status, "the failure was not recorded, and the row waits as published")
		require.Nil(t, r.LastError)
		require.EqualValues(t, 1, b.pending(t), "the ticket was acknowledged")
		require.EqualValues(t, 1, b.tickets(t, domain.PostCreated, "failed"))
		require.Empty(t, b.deadTickets(t))

		require.Equal(t, 1, b.ageTickets(t))
		run(t, b.newWorker(t, feeds, fanout.Config{ClaimIdle: takeoverIdle}))
		b.deliver(t)
		b.requireOncePerFollower(t, followers, postID)
		require.Equal(t, "done", b.postRow(t, postID).Status)
		b.requireQueueEmpty(t)
	})

	t.Run("BuryFailingLeavesThePoisonTicketForRedelivery", func(t *testing.T) {
		t.Parallel()
		b, _ := withFollowers(t)
		ob := &hookedOutbox{DB: b.db, beforeBury: func(context.Context, int64) error { return errOnFire }}
		var id int64
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`INSERT INTO outbox (event_type, payload) VALUES ('post.created', '{}') RETURNING id`).Scan(&id))
		first := run(t, b.newOutboxWorker(t, b.feeds, ob, fanout.Config{}))
		b.dispatch(t)
		eventually(t, func(c *assert.CollectT) { require.EqualValues(c, 1, ob.buries.Load()) })
		first.stop(t)
		require.Equal(t, "published", b.row(t, id).Status)
		require.EqualValues(t, 1, b.pending(t))
		require.Empty(t, b.deadTickets(t), "dead-lettered although its row is not dead")

		require.Equal(t, 1, b.ageTickets(t))
		run(t, b.newWorker(t, b.feeds, fanout.Config{ClaimIdle: takeoverIdle}))
		eventually(t, func(c *assert.CollectT) {
			require.Zero(c, b.unfinished(c))
			require.Zero(c, b.pending(c))
		})
		require.Equal(t, "dead", b.row(t, id).Status)
		require.Len(t, b.deadTickets(t), 1)
		b.requireQueueEmpty(t)
	})

	t.Run("LostAcknowledgementIsRedeliveredAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		b, followers := withFollowers(t)
		ackFails := failTimes(1)
		q := &hookedQueue{Queue: b.queue, beforeAck: func(context.Context, string) error { return ackFails() }}
		// The worker looks for stale tickets all the time, and finds its own
		// only once the test made it look stale.
		run(t, b.newWorkerOn(t, b.feeds, b.db, q, fanout.Config{ClaimIdle: takeoverIdle, ClaimInterval: time.Millisecond}))
		postID := b.post(t, author)
		b.dispatch(t)
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 1, q.acks.Load())
			require.EqualValues(c, 1, b.tickets(c, domain.PostCreated, "done"))
			require.EqualValues(c, 1, b.pending(c), "the ticket stays with the worker")
		})
		// The worker takes its own unacknowledged ticket over and handles it again.
		require.Equal(t, 1, b.ageTickets(t))
		b.waitTickets(t, domain.PostCreated, "done", 2)
		require.EqualValues(t, 2, q.acks.Load())
		b.requireOncePerFollower(t, followers, postID)
		require.EqualValues(t, len(followers), b.metric(t, "newsfeed_fanout_entries_total"))
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"), "the redelivery observed the delivery again")
		b.requireQueueEmpty(t)
	})

	t.Run("ReadFailuresAreRetried", func(t *testing.T) {
		t.Parallel()
		b, followers := withFollowers(t)
		readFails := failTimes(2)
		q := &hookedQueue{Queue: b.queue, beforeRead: func(context.Context) error { return readFails() }}
		run(t, b.newWorkerOn(t, b.feeds, b.db, q, fanout.Config{}))
		postID := b.post(t, author)
		b.deliver(t)
		require.GreaterOrEqual(t, q.reads.Load(), int64(3))
		b.requireOncePerFollower(t, followers, postID)
		b.requireQueueEmpty(t)
	})

	t.Run("DeadLetterFailingStillLeavesTheRowDead", func(t *testing.T) {
		t.Parallel()
		b, followers := withFollowers(t)
		deadLetterFails := failTimes(1)
		q := &hookedQueue{Queue: b.queue, beforeDeadLetter: func(context.Context) error { return deadLetterFails() }}
		feeds := &hookedFeeds{Feeds: b.feeds, beforePush: func(context.Context) error { return errOnFire }}
		run(t, b.newWorkerOn(t, feeds, b.db, q,
			fanout.Config{MaxAttempts: 1, ClaimIdle: takeoverIdle, ClaimInterval: time.Millisecond}))
		postID := b.post(t, author)
		b.dispatch(t)
		// The row is dead, and its ticket, which could not be dead-lettered,
		// stays with the worker until it looks stale.
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 1, q.deadLetters.Load())
			require.Zero(c, b.unfinished(c))
			require.EqualValues(c, 1, b.pending(c))
		})
		require.Equal(t, 1, b.ageTickets(t))
		eventually(t, func(c *assert.CollectT) {
			require.Zero(c, b.unfinished(c))
			require.Zero(c, b.pending(c))
		})
		r := b.postRow(t, postID)
		require.Equal(t, "dead", r.Status)
		require.Contains(t, *r.LastError, errOnFire.Error())
		require.GreaterOrEqual(t, q.deadLetters.Load(), int64(1))
		for _, u := range followers {
			require.Empty(t, b.feedPosts(t, u))
		}
		b.requireQueueEmpty(t)
	})
}

func TestUndeliverable(t *testing.T) {
	t.Parallel()

	t.Run("MissingPostIsRetriedLater", func(t *testing.T) {
		t.Parallel()
		// A replica may lag, an operator may restore the post: worth a retry.
		w, b := setup(t, fanout.Config{Backoff: backoff.Schedule{Base: time.Hour, Max: time.Hour}}, feed.Config{})
		var id int64
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`INSERT INTO outbox (event_type, payload) VALUES ('post.created', '{"post_id": 999, "author_id": 1}') RETURNING id`).Scan(&id))
		run(t, w)
		b.dispatch(t)
		b.waitTickets(t, domain.PostCreated, "failed", 1)
		r := b.row(t, id)
		require.Equal(t, "pending", r.Status)
		require.Contains(t, *r.LastError, "does not exist")
		b.requireQueueEmpty(t)
	})

	t.Run("EventNamingAnotherAuthorIsDead", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{}, feed.Config{})
		postID := b.post(t, 1)
		var id int64
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`INSERT INTO outbox (event_type, payload) VALUES ('post.created', jsonb_build_object('post_id', $1::bigint, 'author_id', 2)) RETURNING id`,
			postID).Scan(&id))
		run(t, w)
		b.deliver(t)
		r := b.row(t, id)
		require.Equal(t, "dead", r.Status)
		require.Contains(t, *r.LastError, "is by user 1, not 2")
		own := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d, "author_id": 1}`, postID))
		require.Equal(t, "done", own.Status, "the post's own event")
		b.requireQueueEmpty(t)
	})

	t.Run("MalformedChunkAndFollowEventsAreDead", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{}, feed.Config{})
		var ids []int64
		for _, e := range [][2]string{
			{domain.FanoutChunk, `{"post_id": 1}`},
			{domain.FanoutChunk, `{"post_id": 1, "author_id": 1, "after": -1}`},
			{domain.FollowCreated, `{"follower_id": 1}`},
			{domain.FollowDeleted, `{}`},
			{domain.PostDeleted, `{"post_id": 1}`},
		} {
			var id int64
			require.NoError(t, b.pool.QueryRow(t.Context(),
				`INSERT INTO outbox (event_type, payload) VALUES ($1, $2::jsonb) RETURNING id`, e[0], e[1]).Scan(&id))
			ids = append(ids, id)
		}
		run(t, w)
		b.deliver(t)
		dead := map[string]bool{}
		for _, m := range b.deadTickets(t) {
			id, _ := m.Values["id"].(string)
			dead[id] = true
		}
		for _, id := range ids {
			r := b.row(t, id)
			require.Equal(t, "dead", r.Status, "outbox row %d (%s %s)", id, r.Type, r.Payload)
			require.Contains(t, *r.LastError, "malformed")
			require.True(t, dead[strconv.FormatInt(id, 10)], "dead letter of row %d", id)
		}
		b.requireQueueEmpty(t)
	})
}

func TestDefaults(t *testing.T) {
	t.Parallel()

	t.Run("WorkerWithAZeroConfigDelivers", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t, fanout.Config{}, feed.Config{})
		const author, follower = int64(1), int64(2)
		b.follow(t, author, []int64{follower})
		b.buildFeeds(t, []int64{follower})
		// No consumer name, metrics or logger: the defaults.
		w, err := fanout.New(b.db, b.feeds, b.db, b.queue, fanout.Config{})
		require.NoError(t, err)
		run(t, w)
		postID := b.post(t, author)
		b.deliver(t)
		require.Equal(t, []int64{postID}, b.feedPosts(t, follower))
		require.Zero(t, b.tickets(t, domain.PostCreated, "done"), "the bundle's metrics are not the worker's")
		b.requireQueueEmpty(t)
	})
}
