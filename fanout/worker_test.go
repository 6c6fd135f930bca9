package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sync/errgroup"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/outbox"
	"github.com/newsfeed/newsfeed/queue"
	"github.com/newsfeed/newsfeed/store"
)

// The worker runs a goroutine per ticket and one per heartbeat; none may
// outlive the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakOptions()...)
}

// testBundle is what a worker test works with besides the worker.
type testBundle struct {
	pool    *pgxpool.Pool
	db      *store.DB
	rdb     *redis.Client
	prefix  string
	feeds   *feed.Feeds
	queue   *queue.Queue
	disp    *outbox.Dispatcher
	reg     *prometheus.Registry
	metrics *fanout.Metrics
}

// setup wires a worker like app.Run does, on a database and a Redis key
// prefix of the test's own: the real store, feeds and queue. Zero fields of
// cfg take test defaults (see newWorker). The bundle's dispatcher publishes
// with a long RedeliverAfter, so a ticket is never published twice unless a
// test does it.
func setup(t *testing.T, cfg fanout.Config, feedCfg feed.Config) (*fanout.Worker, *testBundle) {
	t.Helper()
	pool := testenv.NewPool(t)
	rdb, prefix := testenv.NewRedis(t)
	db := store.New(pool, nil)
	feedCfg.Prefix = prefix
	q := queue.New(rdb, prefix+"tickets", "fanout")
	require.NoError(t, q.EnsureGroup(t.Context()))
	reg := prometheus.NewRegistry()
	feeds, err := feed.New(rdb, db, feedCfg)
	require.NoError(t, err)
	b := &testBundle{
		pool:    pool,
		db:      db,
		rdb:     rdb,
		prefix:  prefix,
		feeds:   feeds,
		queue:   q,
		disp:    newDispatcher(t, db, q, outbox.Config{RedeliverAfter: time.Hour}),
		reg:     reg,
		metrics: fanout.NewMetrics(reg),
	}
	return b.newWorker(t, b.feeds, cfg), b
}

var consumerSeq atomic.Int64

// newWorker builds another worker on the bundle, writing through feeds. It
// gets a consumer name of its own and, unless cfg says otherwise, the
// bundle's metrics and a ShutdownTimeout of 5s.
func (b *testBundle) newWorker(t *testing.T, feeds fanout.Feeds, cfg fanout.Config) *fanout.Worker {
	t.Helper()
	return b.newWorkerOn(t, feeds, b.db, b.queue, cfg)
}

// newOutboxWorker is newWorker reporting to ob.
func (b *testBundle) newOutboxWorker(t *testing.T, feeds fanout.Feeds, ob fanout.Outbox, cfg fanout.Config) *fanout.Worker {
	t.Helper()
	return b.newWorkerOn(t, feeds, ob, b.queue, cfg)
}

// newWorkerOn is newWorker reporting to ob and taking tickets from q.
func (b *testBundle) newWorkerOn(t *testing.T, feeds fanout.Feeds, ob fanout.Outbox, q fanout.Queue, cfg fanout.Config) *fanout.Worker {
	t.Helper()
	if cfg.Consumer == "" {
		cfg.Consumer = fmt.Sprintf("worker-%d", consumerSeq.Add(1))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = b.metrics
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	w, err := fanout.New(b.db, feeds, ob, q, cfg)
	require.NoError(t, err)
	return w
}

// The idle times of the take-over tests, which set the tickets' idle times
// instead of waiting for them: a worker that takes over claims tickets idle
// for takeoverIdle, and ageTickets makes the tickets the test means to be
// stale look idle for twice that. Nothing else gets near it, so a slow
// machine can neither make a worker's own ticket stale (a second delivery
// the test did not ask for) nor leave a stale one fresh.
const (
	takeoverIdle = time.Hour
	staleIdle    = 2 * takeoverIdle
)

// ageTickets makes every ticket that a consumer holds in the bundle's queue,
// in any partition, look idle for staleIdle, and returns how many it aged.
func (b *testBundle) ageTickets(t *testing.T) int {
	t.Helper()
	n := 0
	for p := range b.queue.Partitions() {
		n += testenv.AgePending(t, b.rdb, b.queue.Key(p), "fanout", staleIdle)
	}
	return n
}

// running is a worker's Run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

// run starts w.Run; the test's end stops it.
func run(t *testing.T, w *fanout.Worker) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// wait waits for Run to return, and fails the test if it does not within
// 20s (a Read blocks up to 1s, and the tests' ShutdownTimeout is at most 5s)
// or returns an error. Waiting again returns at once.
func (r *running) wait(t *testing.T) {
	t.Helper()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
			require.NoError(t, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s after its context ended")
	}
}

// stop cancels Run and waits for it.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	r.wait(t)
}

// tb is what the query helpers need: a *testing.T, or the *assert.CollectT
// of require.EventuallyWithT.
type tb interface {
	require.TestingT
	Helper()
}

// eventually waits up to 30s for check to pass.
func eventually(t *testing.T, check func(c *assert.CollectT), msgAndArgs ...any) {
	t.Helper()
	require.EventuallyWithT(t, check, 30*time.Second, 10*time.Millisecond, msgAndArgs...)
}

// follow makes every follower follow author, in bulk (no outbox rows).
func (b *testBundle) follow(t *testing.T, author int64, followers []int64) {
	t.Helper()
	rows := make([][]any, len(followers))
	for i, f := range followers {
		rows[i] = []any{f, author}
	}
	n, err := b.pool.CopyFrom(t.Context(), pgx.Identifier{"follows"}, []string{"follower_id", "followee_id"},
		pgx.CopyFromRows(rows))
	require.NoError(t, err)
	require.EqualValues(t, len(followers), n)
}

// buildFeeds makes the users' feeds exist, the way their owners do: by
// reading them once.
func (b *testBundle) buildFeeds(t *testing.T, users []int64) {
	t.Helper()
	g, ctx := errgroup.WithContext(t.Context())
	g.SetLimit(16)
	for _, u := range users {
		g.Go(func() error {
			_, err := b.feeds.Read(ctx, u, 0, 1)
			return err
		})
	}
	require.NoError(t, g.Wait())
}

// post creates a post by author, with its post.created outbox row.
func (b *testBundle) post(t *testing.T, author int64) int64 {
	t.Helper()
	p, created, err := b.db.CreatePost(t.Context(), author, "post by "+strconv.FormatInt(author, 10), "")
	require.NoError(t, err)
	require.True(t, created)
	return p.ID
}

// dispatch publishes every due outbox row.
func (b *testBundle) dispatch(t *testing.T) {
	t.Helper()
	for {
		n, err := b.disp.DispatchOnce(t.Context())
		require.NoError(t, err)
		if n == 0 {
			return
		}
	}
}

// unfinished counts outbox rows that are neither done nor dead.
func (b *testBundle) unfinished(t tb) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox WHERE status NOT IN ('done', 'dead')`).Scan(&n))
	return n
}

// deliver publishes every due outbox row and waits until a running worker
// finished them all and acknowledged their tickets.
func (b *testBundle) deliver(t *testing.T) {
	t.Helper()
	b.dispatch(t)
	eventually(t, func(c *assert.CollectT) {
		require.Zero(c, b.unfinished(c))
		require.Zero(c, b.pending(c))
	})
}

// outboxRow is an outbox row as the table holds it.
type outboxRow struct {
	ID        int64
	Type      string
	Payload   []byte
	Status    string
	Attempts  int
	LastError *string
	DueIn     time.Duration // due_at - now(), on the database clock
}

func (b *testBundle) row(t tb, id int64) outboxRow {
	t.Helper()
	var r outboxRow
	var dueIn *float64
	err := b.pool.QueryRow(context.Background(), `
SELECT id, event_type, payload, status, attempts, last_error,
       CASE WHEN due_at <> 'infinity' THEN extract(epoch FROM due_at - now())::float8 END
FROM outbox WHERE id = $1`, id).Scan(&r.ID, &r.Type, &r.Payload, &r.Status, &r.Attempts, &r.LastError, &dueIn)
	require.NoError(t, err)
	r.DueIn = time.Duration(math.MaxInt64) // never: a parent waiting for its chunks
	if dueIn != nil {
		r.DueIn = time.Duration(*dueIn * float64(time.Second))
	}
	return r
}

// rowOf returns the one outbox row of type typ whose payload contains match.
func (b *testBundle) rowOf(t *testing.T, typ, match string) outboxRow {
	t.Helper()
	rows, err := b.pool.Query(t.Context(),
		`SELECT id FROM outbox WHERE event_type = $1 AND payload @> $2::jsonb`, typ, match)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 1, "outbox rows of type %s with %s", typ, match)
	return b.row(t, ids[0])
}

// pending counts tickets delivered to a consumer and not acknowledged.
func (b *testBundle) pending(t tb) int64 {
	t.Helper()
	n, err := b.queue.Pending(context.Background())
	require.NoError(t, err)
	return n
}

func (b *testBundle) xlen(t tb, stream string) int64 {
	t.Helper()
	n, err := b.rdb.XLen(context.Background(), stream).Result()
	require.NoError(t, err)
	return n
}

// requireQueueEmpty checks that every ticket was acknowledged and deleted.
func (b *testBundle) requireQueueEmpty(t *testing.T) {
	t.Helper()
	require.Zero(t, b.pending(t), "tickets delivered and not acknowledged")
	require.Zero(t, b.xlen(t, b.queue.Stream()), "tickets left in the stream")
}

func (b *testBundle) feedKey(userID int64) string {
	return feed.Key(b.prefix, userID)
}

// feedPosts returns the post ids in the user's feed, ascending, without the
// marker; nil when the feed does not exist.
func (b *testBundle) feedPosts(t tb, userID int64) []int64 {
	t.Helper()
	stored, err := feed.Inspect(context.Background(), b.rdb, b.prefix, userID)
	require.NoError(t, err)
	return stored.IDs
}

func (b *testBundle) feedExists(t tb, userID int64) bool {
	t.Helper()
	n, err := b.rdb.Exists(context.Background(), b.feedKey(userID)).Result()
	require.NoError(t, err)
	return n == 1
}

// readFeed returns the ids of the first page of the user's home feed, as the
// API serves it.
func (b *testBundle) readFeed(t *testing.T, userID int64) []int64 {
	t.Helper()
	page, err := b.feeds.Read(t.Context(), userID, 0, 100)
	require.NoError(t, err)
	ids := make([]int64, len(page.Posts))
	for i, p := range page.Posts {
		ids[i] = p.ID
	}
	return ids
}

// claim claims the outbox's pending events, as a dispatcher does, and
// requires n of them.
func (b *testBundle) claim(t *testing.T, n int) []domain.Event {
	t.Helper()
	events, err := b.db.Claim(t.Context(), 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, events, n)
	return events
}

// publish puts tickets for events in the stream, as a dispatcher does.
func (b *testBundle) publish(t *testing.T, events ...domain.Event) {
	t.Helper()
	_, errs := b.queue.Publish(t.Context(), events)
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// deadTickets returns the dead-letter stream's entries.
func (b *testBundle) deadTickets(t *testing.T) []redis.XMessage {
	t.Helper()
	msgs, err := b.rdb.XRange(t.Context(), b.queue.Stream()+":dead", "-", "+").Result()
	require.NoError(t, err)
	return msgs
}

// metric sums the samples of the counter or histogram name whose labels
// include labels (a histogram counts its observations).
func (b *testBundle) metric(t tb, name string, labels ...string) float64 {
	t.Helper()
	families, err := b.reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			if h := m.GetHistogram(); h != nil {
				sum += float64(h.GetSampleCount())
			} else {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func (b *testBundle) tickets(t tb, typ, outcome string) float64 {
	t.Helper()
	return b.metric(t, "newsfeed_fanout_tickets_total", "type", typ, "outcome", outcome)
}

func userRange(from, to int64) []int64 {
	ids := make([]int64, 0, to-from+1)
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return ids
}

// hookedFeeds is the real feeds with hooks run before some calls (to fail,
// block or change state meanwhile) and counts of those calls. A nil hook
// does nothing.
type hookedFeeds struct {
	fanout.Feeds
	beforePush       func(ctx context.Context) error
	beforeFollowed   func(ctx context.Context, follower, followee int64) error // before a following state is applied
	beforeUnfollowed func(ctx context.Context, follower, followee int64) error // before a not-following state is

	pushes, followed, unfollowed atomic.Int64
}

func (f *hookedFeeds) Push(ctx context.Context, e domain.Entry, followers []int64, asOf int64, first bool) (domain.PushResult, error) {
	if len(followers) == 1 && followers[0] == e.AuthorID {
		return f.Feeds.Push(ctx, e, followers, asOf, first) // the author's own feed: not a page of followers
	}
	f.pushes.Add(1)
	if f.beforePush != nil {
		if err := f.beforePush(ctx); err != nil {
			return domain.PushResult{}, err
		}
	}
	return f.Feeds.Push(ctx, e, followers, asOf, first)
}

// ApplyFollow counts an application of a follow state in followed or
// unfollowed, and runs beforeFollowed or beforeUnfollowed first.
func (f *hookedFeeds) ApplyFollow(ctx context.Context, st domain.EdgeState) (int, bool, error) {
	count, hook := &f.unfollowed, f.beforeUnfollowed
	if st.Following {
		count, hook = &f.followed, f.beforeFollowed
	}
	count.Add(1)
	if hook != nil {
		if err := hook(ctx, st.Follower, st.Followee); err != nil {
			return 0, false, err
		}
	}
	return f.Feeds.ApplyFollow(ctx, st)
}

var errOnFire = errors.New("redis is on fire")

func TestPostCreated(t *testing.T) {
	t.Parallel()

	t.Run("ReachesEveryFollowerWithAFeedExactlyOnce", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{}, feed.Config{})
		const author = int64(1)
		// 2500 followers with a feed, 100 without, interleaved across the
		// worker's pages of 1000.
		var withFeed, withoutFeed []int64
		for id := int64(2); len(withFeed) < 2500 || len(withoutFeed) < 100; id++ {
			if id%26 == 0 && len(withoutFeed) < 100 {
				withoutFeed = append(withoutFeed, id)
			} else if len(withFeed) < 2500 {
				withFeed = append(withFeed, id)
			} else {
				withoutFeed = append(withoutFeed, id)
			}
		}
		b.follow(t, author, append(append([]int64{}, withFeed...), withoutFeed...))
		b.buildFeeds(t, withFeed)
		for _, u := range withoutFeed {
			require.False(t, b.feedExists(t, u))
		}

		run(t, w)
		postID := b.post(t, author)
		b.deliver(t)

		// Every feed, in one round trip.
		feeds, err := feed.InspectMany(t.Context(), b.rdb, b.prefix, withFeed)
		require.NoError(t, err)
		for i, u := range withFeed {
			require.True(t, feeds[i].Complete && feeds[i].Whole, "follower %d: complete, whole history", u)
			require.Equal(t, []int64{postID}, feeds[i].IDs, "follower %d: the post", u)
		}
		for _, u := range withoutFeed {
			require.False(t, b.feedExists(t, u), "a feed was created for follower %d, who never read it", u)
		}

		require.EqualValues(t, 2500, b.metric(t, "newsfeed_fanout_entries_total"))
		require.EqualValues(t, 1, b.tickets(t, domain.PostCreated, "done"))
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"))
		r := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
		require.Equal(t, "done", r.Status)
		require.Nil(t, r.LastError)
		b.requireQueueEmpty(t)

		// Followers see it as the API serves it.
		require.Equal(t, []int64{postID}, b.readFeed(t, withFeed[0]))
		require.Equal(t, []int64{postID}, b.readFeed(t, withFeed[len(withFeed)-1]))
	})

	t.Run("SameEventTwiceLeavesEachFeedWithThePostOnce", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{Concurrency: 2, PageSize: 7}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 51)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)
		postID := b.post(t, author)

		// The same claim in two tickets (a publish retried after its reply
		// was lost), processed side by side.
		events := b.claim(t, 1)
		b.publish(t, events[0], events[0])
		run(t, w)
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 2, b.tickets(c, domain.PostCreated, "done"))
		})
		// And once more after both finished.
		b.publish(t, events[0])
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 3, b.tickets(c, domain.PostCreated, "done"))
		})

		for _, u := range followers {
			require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
			require.Equal(t, []int64{postID}, b.readFeed(t, u), "follower %d", u)
		}
		// Each ticket of the claim took itself for the first delivery and
		// appended without looking (feed.Feeds.Push): the count says what
		// was appended, the feeds keep one of each.
		require.EqualValues(t, 3*len(followers), b.metric(t, "newsfeed_fanout_entries_total"))
		require.Equal(t, "done", b.row(t, events[0].ID).Status)
		eventually(t, func(c *assert.CollectT) { require.Zero(c, b.pending(c)) })
		b.requireQueueEmpty(t)
	})

	t.Run("ARedeliveryLooksAndCountsNothingAgain", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{Concurrency: 2, PageSize: 7}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 51)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)
		postID := b.post(t, author)
		events := b.claim(t, 1)
		b.publish(t, events[0])
		run(t, w)
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 1, b.tickets(c, domain.PostCreated, "done"))
		})
		// The event claimed again (its first claim's lease ran out): the
		// feeds are read, and the post is in every one.
		again := events[0]
		again.Attempt = 2
		b.publish(t, again)
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 2, b.tickets(c, domain.PostCreated, "done"))
		})
		for _, u := range followers {
			require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
		}
		require.EqualValues(t, len(followers), b.metric(t, "newsfeed_fanout_entries_total"),
			"a redelivery's repeats are not counted")
	})

	t.Run("TrimsFeedsToMaxLenKeepingTheMarker", func(t *testing.T) {
		t.Parallel()
		const maxLen = 5
		w, b := setup(t, fanout.Config{Concurrency: 1}, feed.Config{MaxLen: maxLen})
		const author, follower = int64(1), int64(2)
		b.follow(t, author, []int64{follower})
		b.buildFeeds(t, []int64{follower})
		run(t, w)

		var posts []int64
		for range 8 {
			posts = append(posts, b.post(t, author))
		}
		b.deliver(t)

		stored, err := feed.Inspect(t.Context(), b.rdb, b.prefix, follower)
		require.NoError(t, err)
		require.True(t, stored.Complete, "the feed stays complete")
		require.Equal(t, posts[len(posts)-maxLen:], stored.IDs, "the newest MaxLen posts are kept")
		require.EqualValues(t, 8, b.metric(t, "newsfeed_fanout_entries_total"))
		b.requireQueueEmpty(t)
	})

	t.Run("AuthorWithoutFollowersFinishes", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{}, feed.Config{})
		run(t, w)
		postID := b.post(t, 1)
		b.deliver(t)
		require.Equal(t, "done", b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID)).Status)
		require.Zero(t, b.metric(t, "newsfeed_fanout_entries_total"))
		b.requireQueueEmpty(t)
	})
}

func TestPoisonAndFailures(t *testing.T) {
	t.Parallel()

	t.Run("PoisonTicketIsParkedDeadAtOnceAndDoesNotBlockTheOthers", func(t *testing.T) {
		t.Parallel()
		// One ticket at a time: the 50 good ones queue behind the poison.
		w, b := setup(t, fanout.Config{Concurrency: 1}, feed.Config{})
		const author, follower = int64(1), int64(2)
		b.follow(t, author, []int64{follower})
		b.buildFeeds(t, []int64{follower})

		// A ticket whose payload is not JSON (its outbox row is fine).
		var notJSON int64
		require.NoError(t, b.pool.QueryRow(t.Context(), `
INSERT INTO outbox (event_type, payload, status, attempts, due_at)
VALUES ('post.created', '{"post_id": 999999, "author_id": 1}', 'published', 1, now() + interval '1 hour')
RETURNING id`).Scan(&notJSON))
		b.publish(t, domain.Event{ID: notJSON, Type: domain.PostCreated, Payload: []byte("not json"), Attempt: 1, CreatedAt: time.Now()})
		// An unknown event type, and a payload that says nothing.
		var unknown, empty int64
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`INSERT INTO outbox (event_type, payload) VALUES ('post.liked', '{"post_id": 999999}') RETURNING id`).Scan(&unknown))
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`INSERT INTO outbox (event_type, payload) VALUES ('post.created', '{}') RETURNING id`).Scan(&empty))
		var good []int64
		for range 50 {
			good = append(good, b.post(t, author))
		}
		b.dispatch(t) // the stream: not json, unknown, empty, then the 50 good ones

		run(t, w)
		eventually(t, func(c *assert.CollectT) {
			require.Zero(c, b.unfinished(c))
			require.Zero(c, b.pending(c))
		})

		for _, id := range []int64{notJSON, unknown, empty} {
			r := b.row(t, id)
			require.Equal(t, "dead", r.Status, "outbox row %d", id)
			require.Equal(t, 1, r.Attempts, "outbox row %d was retried", id)
			require.NotNil(t, r.LastError, "outbox row %d", id)
			require.NotEmpty(t, *r.LastError, "outbox row %d", id)
		}
		require.Contains(t, *b.row(t, notJSON).LastError, "malformed")
		require.Contains(t, *b.row(t, unknown).LastError, "unknown event type")
		require.Contains(t, *b.row(t, empty).LastError, "malformed")

		dead := b.deadTickets(t)
		require.Len(t, dead, 3)
		deadIDs := map[string]string{}
		for _, m := range dead {
			id, _ := m.Values["id"].(string)
			cause, _ := m.Values["cause"].(string)
			deadIDs[id] = cause
		}
		for _, id := range []int64{notJSON, unknown, empty} {
			require.NotEmpty(t, deadIDs[strconv.FormatInt(id, 10)], "dead letter of outbox row %d with its cause", id)
		}

		require.Equal(t, good, b.feedPosts(t, follower))
		for _, id := range good {
			require.Equal(t, "done", b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, id)).Status)
		}
		require.EqualValues(t, 3, b.metric(t, "newsfeed_fanout_tickets_total", "outcome", "dead"))
		require.EqualValues(t, 50, b.tickets(t, domain.PostCreated, "done"))
		b.requireQueueEmpty(t)
	})

	t.Run("TransientFailureGoesBackToPendingWithBackoff", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t, fanout.Config{}, feed.Config{})
		const author, follower = int64(1), int64(2)
		b.follow(t, author, []int64{follower})
		b.buildFeeds(t, []int64{follower})
		var failures atomic.Int64
		failures.Store(1)
		feeds := &hookedFeeds{Feeds: b.feeds, beforePush: func(context.Context) error {
			if failures.Add(-1) >= 0 {
				return errOnFire
			}
			return nil
		}}
		ob := &hookedOutbox{DB: b.db}
		run(t, b.newOutboxWorker(t, feeds, ob, fanout.Config{
			MaxAttempts: 5,
			Backoff:     backoff.Schedule{Base: time.Minute, Max: time.Hour},
		}))
		postID := b.post(t, author)
		match := fmt.Sprintf(`{"post_id": %d}`, postID)
		b.dispatch(t)

		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 1, b.tickets(c, domain.PostCreated, "failed"))
			require.Zero(c, b.pending(c))
		})
		r := b.rowOf(t, domain.PostCreated, match)
		require.Equal(t, "pending", r.Status, "the outbox row owns the retry")
		require.Equal(t, 1, r.Attempts)
		require.NotNil(t, r.LastError)
		require.Contains(t, *r.LastError, errOnFire.Error())
		// Backoff.Delay(1) = 1 minute ± 25%, and the row is due then.
		retries := ob.failRetries()
		require.Len(t, retries, 1)
		require.GreaterOrEqual(t, retries[0], 45*time.Second)
		require.LessOrEqual(t, retries[0], 75*time.Second)
		require.Positive(t, r.DueIn, "due before its backoff")
		require.LessOrEqual(t, r.DueIn, retries[0])
		b.requireQueueEmpty(t)
		require.Empty(t, b.feedPosts(t, follower))
		require.Empty(t, b.deadTickets(t))

		// When the backoff ends the dispatcher publishes it again, and it goes through.
		_, err := b.pool.Exec(t.Context(), `UPDATE outbox SET due_at = now() WHERE id = $1`, r.ID)
		require.NoError(t, err)
		b.deliver(t)
		r = b.row(t, r.ID)
		require.Equal(t, "done", r.Status)
		require.Equal(t, 2, r.Attempts)
		require.Nil(t, r.LastError)
		require.Equal(t, []int64{postID}, b.feedPosts(t, follower))
		b.requireQueueEmpty(t)
	})

	t.Run("UnavailableDependencyPostponesWithoutCountingAFailure", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t, fanout.Config{}, feed.Config{})
		const author, follower = int64(1), int64(2)
		b.follow(t, author, []int64{follower})
		b.buildFeeds(t, []int64{follower})
		var refusals atomic.Int64
		refusals.Store(3)
		feeds := &hookedFeeds{Feeds: b.feeds, beforePush: func(context.Context) error {
			if refusals.Add(-1) >= 0 {
				return fmt.Errorf("replicas behind: %w", domain.ErrUnavailable)
			}
			return nil
		}}
		// One counted failure would make the event dead at once.
		run(t, b.newWorker(t, feeds, fanout.Config{MaxAttempts: 1}))
		postID := b.post(t, author)
		for round := 1; round <= 3; round++ {
			b.dispatch(t)
			eventually(t, func(c *assert.CollectT) {
				require.EqualValues(c, round, b.tickets(c, domain.PostCreated, "postponed"))
				require.Zero(c, b.pending(c))
			})
			r := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
			require.Equal(t, "pending", r.Status, "round %d: postponed, not dead", round)
			require.Equal(t, 0, b.failuresOf(t, r.ID), "round %d: not counted", round)
			require.Contains(t, *r.LastError, "replicas behind")
			require.Positive(t, r.DueIn, "round %d", round)
			require.LessOrEqual(t, r.DueIn, backoff.MaxPostpone, "round %d", round)
			_, err := b.pool.Exec(t.Context(), `UPDATE outbox SET due_at = now() WHERE id = $1`, r.ID)
			require.NoError(t, err)
		}
		b.deliver(t)
		require.Equal(t, "done", b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID)).Status)
		require.Equal(t, []int64{postID}, b.feedPosts(t, follower))
		require.Empty(t, b.deadTickets(t))
	})

	t.Run("AnUnavailablePageDoesNotStopThePagesAfterIt", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t, fanout.Config{}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 11) // pages of 3: 2–4, 5–7, 8–10, 11
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)
		var calls atomic.Int64
		feeds := &hookedFeeds{Feeds: b.feeds, beforePush: func(context.Context) error {
			if calls.Add(1) == 1 { // the first page, the first time
				return fmt.Errorf("replicas behind: %w", domain.ErrUnavailable)
			}
			return nil
		}}
		run(t, b.newWorker(t, feeds, fanout.Config{PageSize: 3, MaxAttempts: 1}))
		postID := b.post(t, author)
		b.dispatch(t)
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 1, b.tickets(c, domain.PostCreated, "postponed"))
		})
		for _, u := range followers[3:] {
			require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d, after the page that was held back", u)
		}
		for _, u := range followers[:3] {
			require.Empty(t, b.feedPosts(t, u), "follower %d, in the page held back", u)
		}
		r := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
		require.Equal(t, "pending", r.Status)
		_, err := b.pool.Exec(t.Context(), `UPDATE outbox SET due_at = now() WHERE id = $1`, r.ID)
		require.NoError(t, err)
		b.deliver(t)
		for _, u := range followers {
			require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
		}
	})

	t.Run("FailureOfTheLastAttemptIsDead", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t, fanout.Config{}, feed.Config{})
		const author, follower = int64(1), int64(2)
		b.follow(t, author, []int64{follower})
		b.buildFeeds(t, []int64{follower})
		feeds := &hookedFeeds{Feeds: b.feeds, beforePush: func(context.Context) error { return errOnFire }}
		run(t, b.newWorker(t, feeds, fanout.Config{MaxAttempts: 1}))
		postID := b.post(t, author)
		b.dispatch(t)

		eventually(t, func(c *assert.CollectT) {
			require.Zero(c, b.unfinished(c))
			require.Zero(c, b.pending(c))
		})
		r := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
		require.Equal(t, "dead", r.Status)
		require.NotNil(t, r.LastError)
		require.Contains(t, *r.LastError, errOnFire.Error())
		dead := b.deadTickets(t)
		require.Len(t, dead, 1)
		require.Equal(t, strconv.FormatInt(r.ID, 10), dead[0].Values["id"])
		require.Contains(t, dead[0].Values["cause"], errOnFire.Error())
		b.requireQueueEmpty(t)
	})
}

func TestRedelivery(t *testing.T) {
	t.Parallel()

	t.Run("StaleTicketOfADeadConsumerIsTakenOver", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{ClaimIdle: takeoverIdle}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 11)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)
		postID := b.post(t, author)
		b.dispatch(t)

		// A worker reads the ticket and dies.
		taken, err := b.queue.Read(t.Context(), "dead-worker", 10, 10*time.Millisecond)
		require.NoError(t, err)
		require.Len(t, taken, 1)
		require.EqualValues(t, 1, taken[0].Deliveries)

		require.Equal(t, 1, b.ageTickets(t))
		run(t, w)
		b.deliver(t)
		for _, u := range followers {
			require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
		}
		require.EqualValues(t, 1, b.tickets(t, domain.PostCreated, "done"))
		require.EqualValues(t, len(followers), b.metric(t, "newsfeed_fanout_entries_total"))
		stale, err := b.rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{
			Stream: b.queue.Stream(), Group: "fanout", Start: "-", End: "+", Count: 10, Consumer: "dead-worker",
		}).Result()
		require.NoError(t, err)
		require.Empty(t, stale)
		b.requireQueueEmpty(t)
	})

	t.Run("TicketDeliveredMoreThanMaxDeliveriesIsBuried", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{ClaimIdle: takeoverIdle, MaxDeliveries: 2}, feed.Config{})
		const author, follower = int64(1), int64(2)
		b.follow(t, author, []int64{follower})
		b.buildFeeds(t, []int64{follower})
		postID := b.post(t, author)
		b.dispatch(t)

		// Two workers in turn take the ticket and die on it.
		taken, err := b.queue.Read(t.Context(), "dead-worker-1", 10, 10*time.Millisecond)
		require.NoError(t, err)
		require.Len(t, taken, 1)
		taken, err = b.queue.ClaimStale(t.Context(), "dead-worker-2", 0, 10)
		require.NoError(t, err)
		require.Len(t, taken, 1)
		require.EqualValues(t, 2, taken[0].Deliveries)

		require.Equal(t, 1, b.ageTickets(t))
		run(t, w) // the third delivery is one too many
		eventually(t, func(c *assert.CollectT) {
			require.Zero(c, b.unfinished(c))
			require.Zero(c, b.pending(c))
		})
		r := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
		require.Equal(t, "dead", r.Status)
		require.NotNil(t, r.LastError)
		require.Contains(t, *r.LastError, "delivered 3 times")
		dead := b.deadTickets(t)
		require.Len(t, dead, 1)
		require.Equal(t, strconv.FormatInt(r.ID, 10), dead[0].Values["id"])
		require.Equal(t, "3", dead[0].Values["deliveries"])
		require.Empty(t, b.feedPosts(t, follower), "a buried ticket was fanned out")
		require.EqualValues(t, 1, b.tickets(t, domain.PostCreated, "dead"))
		b.requireQueueEmpty(t)
	})

	t.Run("RecoversWhenRedisLosesTheStreamAndItsGroup", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{}, feed.Config{})
		const author, follower = int64(1), int64(2)
		b.follow(t, author, []int64{follower})
		b.buildFeeds(t, []int64{follower})
		run(t, w)
		before := b.post(t, author)
		b.deliver(t)

		// Redis restarts empty (the feed survives here; feed rebuilds are the
		// feed package's business): the next ticket creates a stream without
		// the consumer group.
		require.NoError(t, b.rdb.Del(t.Context(), b.queue.Stream()).Err())
		after := b.post(t, author)
		b.deliver(t)

		require.Equal(t, []int64{before, after}, b.feedPosts(t, follower))
		require.EqualValues(t, 2, b.tickets(t, domain.PostCreated, "done"))
		b.requireQueueEmpty(t)
	})

	t.Run("HeartbeatKeepsALongFanoutFromTakeoverAndRepublishing", func(t *testing.T) {
		t.Parallel()
		// A fan-out that lasts until the test has seen the heartbeat at
		// work, on the state that takeovers and republications read: the
		// outbox row's redelivery deadline moves on (a dispatcher publishes
		// a row again only once it passed), and the ticket's idle time in
		// the stream drops back (ClaimStale takes only tickets idle for
		// ClaimIdle). The test waits for that state, not for a clock.
		const (
			claimIdle      = 3 * time.Second // a heartbeat every second
			redeliverAfter = time.Hour
		)
		_, b := setup(t, fanout.Config{}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 11)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)

		started, release := make(chan struct{}), make(chan struct{})
		var startOnce sync.Once
		slow := &hookedFeeds{Feeds: b.feeds, beforePush: func(ctx context.Context) error {
			startOnce.Do(func() { close(started) })
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-release:
				return nil
			}
		}}
		const consumer = "heartbeat-worker"
		run(t, b.newWorker(t, slow, fanout.Config{ClaimIdle: claimIdle, RedeliverAfter: redeliverAfter, Consumer: consumer}))

		postID := b.post(t, author)
		disp := newDispatcher(t, b.db, b.queue, outbox.Config{RedeliverAfter: redeliverAfter})
		n, err := disp.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the worker did not start the fan-out")
		}
		r := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
		var published time.Time
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT due_at FROM outbox WHERE id = $1`, r.ID).Scan(&published))

		// Extend: the deadline moves past the one the publication set.
		eventually(t, func(c *assert.CollectT) {
			var due time.Time
			require.NoError(c, b.pool.QueryRow(context.Background(), `SELECT due_at FROM outbox WHERE id = $1`, r.ID).Scan(&due))
			require.True(c, due.After(published), "due_at %v not extended past %v", due, published)
		}, "the heartbeat extends the outbox row")
		// Touch: the ticket's idle time, which only grows between touches,
		// drops back; the ticket stays with its worker.
		var previous time.Duration
		eventually(t, func(c *assert.CollectT) {
			p, err := b.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{
				Stream: b.queue.Stream(), Group: "fanout", Start: "-", End: "+", Count: 10,
			}).Result()
			require.NoError(c, err)
			require.Len(c, p, 1)
			require.Equal(c, consumer, p[0].Consumer)
			idle := p[0].Idle
			touched := idle < previous
			previous = idle
			require.True(c, touched, "idle %v", idle)
		}, "the heartbeat touches the ticket")
		close(release)

		b.deliver(t)
		r = b.row(t, r.ID)
		require.Equal(t, "done", r.Status)
		require.Equal(t, 1, r.Attempts, "the outbox row was published again during its fan-out")
		for _, u := range followers {
			require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
		}
		b.requireQueueEmpty(t)
	})
}

func TestPostDeleted(t *testing.T) {
	t.Parallel()

	t.Run("LeavesFollowersFeedsAndIsTombstoned", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{PageSize: 7}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 21)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)
		run(t, w)
		deleted, kept := b.post(t, author), b.post(t, author)
		b.deliver(t)
		for _, u := range followers {
			// Reading caches the posts, so the cache must learn of the delete.
			require.Equal(t, []int64{kept, deleted}, b.readFeed(t, u), "follower %d", u)
		}

		require.NoError(t, b.db.DeletePost(t.Context(), deleted, author))
		b.deliver(t)

		for _, u := range followers {
			require.Equal(t, []int64{kept}, b.feedPosts(t, u), "follower %d", u)
			require.Equal(t, []int64{kept}, b.readFeed(t, u), "follower %d", u)
		}
		cached, err := b.rdb.Get(t.Context(), b.prefix+"post:"+strconv.FormatInt(deleted, 10)).Result()
		require.NoError(t, err)
		require.Equal(t, "-", cached, "the post cache holds a tombstone")
		require.EqualValues(t, 1, b.tickets(t, domain.PostDeleted, "done"))
		b.requireQueueEmpty(t)
	})
}

func TestEventOrder(t *testing.T) {
	t.Parallel()

	t.Run("DeletedPostProcessedBeforeItsCreationNeverShows", func(t *testing.T) {
		t.Parallel()
		// post.created fails transiently and is retried after post.deleted
		// went through: the late push must not resurrect the post.
		w, b := setup(t, fanout.Config{Concurrency: 1}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 6)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)
		postID := b.post(t, author)
		require.NoError(t, b.db.DeletePost(t.Context(), postID, author))
		events := b.claim(t, 2)
		require.Equal(t, domain.PostCreated, events[0].Type)
		b.publish(t, events[1], events[0]) // deleted, then created

		run(t, w)
		eventually(t, func(c *assert.CollectT) {
			require.Zero(c, b.unfinished(c))
			require.Zero(c, b.pending(c))
		})
		for _, u := range followers {
			require.Empty(t, b.readFeed(t, u), "follower %d sees a deleted post", u)
		}
		b.requireQueueEmpty(t)
	})
}

func TestFollow(t *testing.T) {
	t.Parallel()

	t.Run("CreatedMergesTheFolloweesRecentPostsIntoAnExistingFeed", func(t *testing.T) {
		t.Parallel()
		const backfill = 3
		w, b := setup(t, fanout.Config{}, feed.Config{Backfill: backfill})
		const followee, reader, nonReader = int64(10), int64(1), int64(2)
		run(t, w)
		var posts []int64
		for range 5 {
			posts = append(posts, b.post(t, followee))
		}
		b.deliver(t)
		b.buildFeeds(t, []int64{reader})
		require.Empty(t, b.feedPosts(t, reader))

		for _, u := range []int64{reader, nonReader} {
			created, err := b.db.Follow(t.Context(), u, followee)
			require.NoError(t, err)
			require.True(t, created.Changed)
		}
		b.deliver(t)

		require.Equal(t, posts[len(posts)-backfill:], b.feedPosts(t, reader))
		require.False(t, b.feedExists(t, nonReader), "a feed was created for a user who never read it")
		require.EqualValues(t, backfill, b.metric(t, "newsfeed_fanout_entries_total"))
		require.EqualValues(t, 2, b.tickets(t, domain.FollowCreated, "done"))

		// A redelivered follow.created changes nothing.
		r := b.rowOf(t, domain.FollowCreated, fmt.Sprintf(`{"follower_id": %d}`, reader))
		b.publish(t, domain.Event{ID: r.ID, Type: r.Type, Payload: r.Payload, Attempt: 2, CreatedAt: time.Now()})
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 3, b.tickets(c, domain.FollowCreated, "done"))
			require.Zero(c, b.pending(c))
		})
		require.Equal(t, posts[len(posts)-backfill:], b.feedPosts(t, reader))
		require.EqualValues(t, backfill, b.metric(t, "newsfeed_fanout_entries_total"))
		b.requireQueueEmpty(t)
	})

	t.Run("DeletedRemovesTheFolloweesPosts", func(t *testing.T) {
		t.Parallel()
		w, b := setup(t, fanout.Config{}, feed.Config{Backfill: 50})
		const reader, dropped, stays = int64(1), int64(10), int64(20)
		run(t, w)
		var droppedPosts, keptPosts []int64
		for range 3 {
			droppedPosts = append(droppedPosts, b.post(t, dropped))
			keptPosts = append(keptPosts, b.post(t, stays))
		}
		for _, followee := range []int64{dropped, stays} {
			_, err := b.db.Follow(t.Context(), reader, followee)
			require.NoError(t, err)
		}
		b.deliver(t)
		b.buildFeeds(t, []int64{reader})
		require.ElementsMatch(t, append(append([]int64{}, droppedPosts...), keptPosts...), b.feedPosts(t, reader))

		removed, err := b.db.Unfollow(t.Context(), reader, dropped)
		require.NoError(t, err)
		require.True(t, removed.Changed)
		b.deliver(t)

		require.Equal(t, keptPosts, b.feedPosts(t, reader))
		feedIDs := b.readFeed(t, reader)
		require.Len(t, feedIDs, len(keptPosts))
		for _, id := range feedIDs {
			require.Contains(t, keptPosts, id)
		}
		require.EqualValues(t, 1, b.tickets(t, domain.FollowDeleted, "done"))
		b.requireQueueEmpty(t)
	})

	t.Run("RedeliveredFollowAfterUnfollowDoesNotBringPostsBack", func(t *testing.T) {
		t.Parallel()
		// Delivery is at least once and tickets are processed in any order:
		// a follow.created ticket may be processed after the unfollow's
		// follow.deleted (a redelivery after a lost Finish, a retry after a
		// transient failure, or just two workers racing).
		w, b := setup(t, fanout.Config{}, feed.Config{Backfill: 50})
		const reader, followee = int64(1), int64(10)
		run(t, w)
		posts := []int64{b.post(t, followee), b.post(t, followee)}
		b.deliver(t)
		b.buildFeeds(t, []int64{reader})
		_, err := b.db.Follow(t.Context(), reader, followee)
		require.NoError(t, err)
		b.deliver(t)
		require.Equal(t, posts, b.feedPosts(t, reader))
		_, err = b.db.Unfollow(t.Context(), reader, followee)
		require.NoError(t, err)
		b.deliver(t)
		require.Empty(t, b.feedPosts(t, reader))

		r := b.rowOf(t, domain.FollowCreated, fmt.Sprintf(`{"follower_id": %d}`, reader))
		b.publish(t, domain.Event{ID: r.ID, Type: r.Type, Payload: r.Payload, Attempt: 2, CreatedAt: time.Now()})
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 2, b.tickets(c, domain.FollowCreated, "done"))
			require.Zero(c, b.pending(c))
		})

		require.Empty(t, b.readFeed(t, reader), "the unfollowed author stays out")
		require.Empty(t, b.feedPosts(t, reader))
	})
}

func TestShutdown(t *testing.T) {
	t.Parallel()

	t.Run("UnfinishedTicketIsLeftPendingForRedelivery", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t, fanout.Config{}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 11)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)

		started := make(chan struct{})
		var startOnce sync.Once
		stuck := &hookedFeeds{Feeds: b.feeds, beforePush: func(ctx context.Context) error {
			startOnce.Do(func() { close(started) })
			<-ctx.Done() // a fan-out longer than ShutdownTimeout
			return ctx.Err()
		}}
		r := run(t, b.newWorker(t, stuck, fanout.Config{ShutdownTimeout: 300 * time.Millisecond}))
		postID := b.post(t, author)
		b.dispatch(t)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the fan-out did not start")
		}

		r.stop(t) // returns after ShutdownTimeout, having cancelled the fan-out

		row := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
		require.Equal(t, "published", row.Status, "an abandoned fan-out must be neither finished nor failed")
		require.Nil(t, row.LastError)
		require.EqualValues(t, 1, b.pending(t), "the ticket must stay pending for redelivery")
		require.EqualValues(t, 1, b.xlen(t, b.queue.Stream()))
		require.Empty(t, b.deadTickets(t))
		require.EqualValues(t, 1, b.tickets(t, domain.PostCreated, "abandoned"))

		// Another worker takes it over and finishes it.
		require.Equal(t, 1, b.ageTickets(t))
		run(t, b.newWorker(t, b.feeds, fanout.Config{ClaimIdle: takeoverIdle}))
		b.deliver(t)
		require.Equal(t, "done", b.row(t, row.ID).Status)
		for _, u := range followers {
			require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
		}
		b.requireQueueEmpty(t)
	})

	t.Run("InFlightFanoutFinishesWithinShutdownTimeout", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t, fanout.Config{}, feed.Config{})
		const author = int64(1)
		followers := userRange(2, 11)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)

		started, release := make(chan struct{}), make(chan struct{})
		var startOnce sync.Once
		slow := &hookedFeeds{Feeds: b.feeds, beforePush: func(ctx context.Context) error {
			startOnce.Do(func() { close(started) })
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
		core, logs := observer.New(zap.InfoLevel)
		r := run(t, b.newWorker(t, slow, fanout.Config{ShutdownTimeout: 20 * time.Second, Logger: zap.New(core)}))
		postID := b.post(t, author)
		b.dispatch(t)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the fan-out did not start")
		}

		r.cancel()
		// Run stops taking tickets and waits for the one in flight. Had it
		// returned instead, it would have cancelled the fan-out's context,
		// and the fan-out would have been abandoned, not finished.
		eventually(t, func(c *assert.CollectT) {
			draining := logs.FilterMessage("stopped taking tickets; waiting for those in flight").All()
			require.Len(c, draining, 1)
			require.EqualValues(c, 1, draining[0].ContextMap()["in_flight"])
		})
		require.Empty(t, r.done, "Run returned with a fan-out in flight")
		close(release)
		r.wait(t)
		require.Zero(t, b.tickets(t, domain.PostCreated, "abandoned"))

		row := b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID))
		require.Equal(t, "done", row.Status)
		for _, u := range followers {
			require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
		}
		b.requireQueueEmpty(t)
	})
}

func (b *testBundle) failuresOf(t *testing.T, id int64) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT failures FROM outbox WHERE id = $1", id).Scan(&n))
	return n
}

// pageCountingGraph is the store, counting the pages of followers read.
type pageCountingGraph struct {
	*store.DB
	pages atomic.Int64
}

func (g *pageCountingGraph) FollowerIDRange(ctx context.Context, authorID, after, until int64, limit int) ([]int64, error) {
	g.pages.Add(1)
	return g.DB.FollowerIDRange(ctx, authorID, after, until, limit)
}

// A fan-out reads its followers a page at a time, and one follower past the
// page tells whether another page follows: followers that fill their last
// page exactly cost no empty page after it (a round trip per post when a
// page was read until one came back short).
func TestFollowerPagesReadOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		followers int64
		pages     int64
	}{{14, 2}, {15, 3}, {6, 1}} {
		t.Run(fmt.Sprintf("%dFollowersInPagesOf7", c.followers), func(t *testing.T) {
			t.Parallel()
			_, b := setup(t, fanout.Config{}, feed.Config{})
			graph := &pageCountingGraph{DB: b.db}
			w, err := fanout.New(graph, b.feeds, b.db, b.queue, fanout.Config{PageSize: 7, Consumer: "pages", Metrics: b.metrics, ShutdownTimeout: 5 * time.Second})
			require.NoError(t, err)
			const author = int64(1)
			followers := userRange(2, 1+c.followers)
			b.follow(t, author, followers)
			b.buildFeeds(t, followers)
			run(t, w)
			postID := b.post(t, author)
			b.deliver(t)
			for _, u := range followers {
				require.Equal(t, []int64{postID}, b.feedPosts(t, u), "follower %d", u)
			}
			require.Equal(t, c.pages, graph.pages.Load(), "pages of followers read")
		})
	}
}
