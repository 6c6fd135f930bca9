package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/outbox"
	"github.com/newsfeed/newsfeed/queue"
	"github.com/newsfeed/newsfeed/store"
)

// The dispatcher runs a loop in a goroutine; none may outlive the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakOptions()...)
}

// testBundle is what a dispatcher test works with besides the dispatcher.
type testBundle struct {
	pool   *pgxpool.Pool
	db     *store.DB
	rdb    *redis.Client
	prefix string
	queue  *queue.Queue
	reg    *prometheus.Registry
}

// setup returns a dispatcher wired like app.Run does, on a database and a
// Redis key prefix of the test's own, publishing to the real queue. Its
// metrics are registered in bundle.reg.
func setup(t *testing.T, cfg outbox.Config) (*outbox.Dispatcher, *testBundle) {
	t.Helper()
	b := newBundle(t)
	return b.dispatcher(t, b.queue, cfg), b
}

func newBundle(t *testing.T) *testBundle {
	t.Helper()
	pool := testenv.NewPool(t)
	rdb, prefix := testenv.NewRedis(t)
	return &testBundle{
		pool:   pool,
		db:     store.New(pool, nil),
		rdb:    rdb,
		prefix: prefix,
		queue:  queue.New(rdb, prefix+"tickets", "fanout"),
		reg:    prometheus.NewRegistry(),
	}
}

// dispatcher builds another dispatcher on the bundle's database, publishing
// with pub. If cfg has no Metrics, they are registered in b.reg (so only the
// first dispatcher of a test may leave them out).
func (b *testBundle) dispatcher(t *testing.T, pub outbox.Publisher, cfg outbox.Config) *outbox.Dispatcher {
	t.Helper()
	if cfg.Metrics == nil {
		cfg.Metrics = outbox.NewMetrics(b.reg)
	}
	return newDispatcher(t, b.db, pub, cfg)
}

// newDispatcher builds a dispatcher, requiring that cfg is valid.
func newDispatcher(t *testing.T, st outbox.Store, pub outbox.Publisher, cfg outbox.Config) *outbox.Dispatcher {
	t.Helper()
	d, err := outbox.NewDispatcher(st, pub, cfg)
	require.NoError(t, err)
	return d
}

// insertEvents writes n pending post.created rows and returns their ids in order.
func (b *testBundle) insertEvents(t *testing.T, n int) []int64 {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `
INSERT INTO outbox (event_type, payload)
SELECT 'post.created', jsonb_build_object('post_id', g, 'author_id', 1)
FROM generate_series(1, $1) g
RETURNING id`, n)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, n)
	return ids
}

// tb is what the query helpers need: a *testing.T, or the *assert.CollectT
// of require.EventuallyWithT.
type tb interface {
	require.TestingT
	Helper()
}

// eventually waits up to 10s for check to pass.
func eventually(t *testing.T, check func(c *assert.CollectT), msgAndArgs ...any) {
	t.Helper()
	require.EventuallyWithT(t, check, 10*time.Second, 10*time.Millisecond, msgAndArgs...)
}

// outboxRow is an outbox row as the table holds it.
type outboxRow struct {
	ID          int64
	Status      string
	Attempts    int
	LastError   *string
	DueIn       time.Duration // due_at - now(), on the database clock
	PublishedAt *time.Time
}

func (b *testBundle) row(t tb, id int64) outboxRow {
	t.Helper()
	var r outboxRow
	var dueIn float64
	err := b.pool.QueryRow(context.Background(), `
SELECT id, status, attempts, last_error, extract(epoch FROM due_at - now())::float8, published_at
FROM outbox WHERE id = $1`, id).Scan(&r.ID, &r.Status, &r.Attempts, &r.LastError, &dueIn, &r.PublishedAt)
	require.NoError(t, err)
	r.DueIn = time.Duration(dueIn * float64(time.Second))
	return r
}

// expire moves the deadline of the rows (a lease, a redelivery deadline:
// both are due_at) to now, as the database clock would once it passed. The
// tests that wait for a deadline set a long one and expire it, so that the
// row is due again exactly when the test says, and a slow machine cannot
// make it due before.
func (b *testBundle) expire(t *testing.T, ids ...int64) {
	t.Helper()
	tag, err := b.pool.Exec(t.Context(), `UPDATE outbox SET due_at = now() WHERE id = ANY($1)`, ids)
	require.NoError(t, err)
	require.EqualValues(t, len(ids), tag.RowsAffected())
}

// requireDueAtDeadline checks that d publishes nothing while the rows'
// deadline is ahead, and, once expire moved it to now, exactly those rows.
func (b *testBundle) requireDueAtDeadline(t *testing.T, d *outbox.Dispatcher, ids ...int64) {
	t.Helper()
	n, err := d.DispatchOnce(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "due before the deadline")
	b.expire(t, ids...)
	n, err = d.DispatchOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, len(ids), n, "due at the deadline")
}

// statusCounts counts outbox rows by status.
func (b *testBundle) statusCounts(t tb) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT status, count(*)::int FROM outbox GROUP BY status`)
	require.NoError(t, err)
	counts := map[string]int{}
	var status string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error {
		counts[status] = n
		return nil
	})
	require.NoError(t, err)
	return counts
}

// streamIDs counts the stream's entries by the outbox id they carry.
func (b *testBundle) streamIDs(t *testing.T) map[int64]int {
	t.Helper()
	msgs, err := b.rdb.XRange(t.Context(), b.queue.Stream(), "-", "+").Result()
	require.NoError(t, err)
	ids := make(map[int64]int, len(msgs))
	for _, m := range msgs {
		s, ok := m.Values["id"].(string)
		require.True(t, ok, "stream entry %s has no id: %v", m.ID, m.Values)
		id, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		ids[id]++
	}
	return ids
}

func (b *testBundle) xlen(t *testing.T) int64 {
	t.Helper()
	n, err := b.rdb.XLen(t.Context(), b.queue.Stream()).Result()
	require.NoError(t, err)
	return n
}

// counter returns the value of the counter name in reg (0 when absent).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// runDispatcher runs d in the background until the returned stop is called
// (or the test ends); stop waits for Run to return and fails the test if it
// does not return promptly or returns an error.
func runDispatcher(t *testing.T, d *outbox.Dispatcher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// errRefused is what the failing publisher answers.
var errRefused = errors.New("queue refused the ticket")

// failingPublisher stands in for a queue that refuses some events: it refuses
// those that refuse returns true for and passes the others to the real queue.
type failingPublisher struct {
	next   outbox.Publisher
	refuse func(domain.Event) bool
	err    error // what a refused event gets; errRefused if nil
}

func (p *failingPublisher) Holds(ctx context.Context, tickets []string) ([]bool, error) {
	return p.next.Holds(ctx, tickets)
}

func (p *failingPublisher) Publish(ctx context.Context, events []domain.Event) ([]string, []error) {
	tickets := make([]string, len(events))
	errs := make([]error, len(events))
	var pass []domain.Event
	var at []int
	for i, e := range events {
		if p.refuse(e) {
			errs[i] = errRefused
			if p.err != nil {
				errs[i] = p.err
			}
			continue
		}
		pass = append(pass, e)
		at = append(at, i)
	}
	if len(pass) > 0 {
		ids, passErrs := p.next.Publish(ctx, pass)
		for j, err := range passErrs {
			tickets[at[j]], errs[at[j]] = ids[j], err
		}
	}
	return tickets, errs
}

func TestDispatchOnce(t *testing.T) {
	t.Parallel()

	t.Run("PublishesPendingRowsAndMarksThemPublished", func(t *testing.T) {
		t.Parallel()
		d, b := setup(t, outbox.Config{RedeliverAfter: time.Hour})
		ids := b.insertEvents(t, 25)

		n, err := d.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Equal(t, 25, n)

		require.Equal(t, map[string]int{"published": 25}, b.statusCounts(t))
		for _, id := range ids {
			r := b.row(t, id)
			require.Equal(t, 1, r.Attempts, "row %d", id)
			require.NotNil(t, r.PublishedAt, "row %d", id)
			require.Nil(t, r.LastError, "row %d", id)
			// Due again only if no worker finishes it within RedeliverAfter.
			require.InDelta(t, time.Hour.Seconds(), r.DueIn.Seconds(), 60, "row %d", id)
		}
		require.EqualValues(t, 25, b.xlen(t))
		seen := b.streamIDs(t)
		require.Len(t, seen, 25)
		for _, id := range ids {
			require.Equal(t, 1, seen[id], "outbox id %d in the stream", id)
		}
		require.EqualValues(t, 25, counter(t, b.reg, "newsfeed_outbox_published_total"))

		// The tickets carry what a worker needs.
		msgs, err := b.rdb.XRange(t.Context(), b.queue.Stream(), "-", "+").Result()
		require.NoError(t, err)
		first := msgs[0].Values
		require.Equal(t, strconv.FormatInt(ids[0], 10), first["id"])
		require.Equal(t, domain.PostCreated, first["type"])
		require.Equal(t, "1", first["attempt"])
		require.JSONEq(t, `{"post_id": 1, "author_id": 1}`, first["payload"].(string))
	})

	t.Run("ClaimsAtMostBatchSize", func(t *testing.T) {
		t.Parallel()
		d, b := setup(t, outbox.Config{BatchSize: 10, RedeliverAfter: time.Hour})
		b.insertEvents(t, 25)

		for _, want := range []int{10, 10, 5, 0} {
			n, err := d.DispatchOnce(t.Context())
			require.NoError(t, err)
			require.Equal(t, want, n)
		}
		require.EqualValues(t, 25, b.xlen(t))
		require.Equal(t, map[string]int{"published": 25}, b.statusCounts(t))
	})

	t.Run("NothingDueReturnsZero", func(t *testing.T) {
		t.Parallel()
		d, b := setup(t, outbox.Config{RedeliverAfter: time.Hour})

		n, err := d.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)

		// Rows scheduled for later, finished or dead are not due either.
		_, err = b.pool.Exec(t.Context(), `
INSERT INTO outbox (event_type, payload, status, due_at) VALUES
    ('post.created', '{}', 'pending', now() + interval '1 hour'),
    ('post.created', '{}', 'published', now() + interval '1 hour'),
    ('post.created', '{}', 'publishing', now() + interval '1 hour'),
    ('post.created', '{}', 'done', now() - interval '1 hour'),
    ('post.created', '{}', 'dead', now() - interval '1 hour')`)
		require.NoError(t, err)
		n, err = d.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)
		require.Zero(t, b.xlen(t))
	})

	t.Run("RefusedEventsGoBackToPendingWithBackoff", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ids := b.insertEvents(t, 10)
		refused := map[int64]bool{ids[1]: true, ids[4]: true, ids[9]: true}
		pub := &failingPublisher{next: b.queue, refuse: func(e domain.Event) bool { return refused[e.ID] }}
		d := b.dispatcher(t, pub, outbox.Config{
			RedeliverAfter: time.Hour,
			MaxAttempts:    5,
			Backoff:        backoff.Schedule{Base: time.Minute, Max: time.Hour},
		})

		n, err := d.DispatchOnce(t.Context())
		require.Equal(t, 10, n)
		require.ErrorIs(t, err, errRefused)

		for _, id := range ids {
			r := b.row(t, id)
			require.Equal(t, 1, r.Attempts, "row %d", id)
			if !refused[id] {
				require.Equal(t, "published", r.Status, "row %d", id)
				require.Nil(t, r.LastError, "row %d", id)
				continue
			}
			require.Equal(t, "pending", r.Status, "row %d", id)
			require.NotNil(t, r.LastError, "row %d", id)
			require.Contains(t, *r.LastError, errRefused.Error(), "row %d", id)
			// Backoff.Delay(1) = 1 minute ± 25%, measured from the database clock.
			require.Greater(t, r.DueIn, 40*time.Second, "row %d", id)
			require.LessOrEqual(t, r.DueIn, 75*time.Second, "row %d", id)
			require.Nil(t, r.PublishedAt, "row %d", id)
		}
		seen := b.streamIDs(t)
		require.Len(t, seen, 7)
		for _, id := range ids {
			if refused[id] {
				require.Zero(t, seen[id], "refused outbox id %d is in the stream", id)
			} else {
				require.Equal(t, 1, seen[id], "outbox id %d in the stream", id)
			}
		}
		require.EqualValues(t, 7, counter(t, b.reg, "newsfeed_outbox_published_total"))
		require.EqualValues(t, 3, counter(t, b.reg, "newsfeed_outbox_publish_failures_total"))
		require.Zero(t, counter(t, b.reg, "newsfeed_outbox_dead_total"))

		// The refused rows are not due before their backoff ends.
		n, err = d.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("UnavailableQueueIsPostponedNeverDead", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		id := b.insertEvents(t, 1)[0]
		var refusals int
		pub := &failingPublisher{next: b.queue, refuse: func(domain.Event) bool { refusals++; return refusals <= 5 }}
		pub.err = fmt.Errorf("replicas behind: %w", domain.ErrUnavailable)
		d := b.dispatcher(t, pub, outbox.Config{
			RedeliverAfter: time.Hour,
			MaxAttempts:    3, // five counted failures would make it dead
			Backoff:        backoff.Schedule{Base: time.Millisecond, Max: time.Millisecond},
		})
		for claim := 1; claim <= 5; claim++ {
			eventually(t, func(c *assert.CollectT) {
				n, err := d.DispatchOnce(context.Background())
				require.Equal(c, 1, n)
				require.NoError(c, err, "postponed: no reason to back off for the other rows")
			}, "claim %d", claim)
			r := b.row(t, id)
			require.Equal(t, "pending", r.Status, "after claim %d", claim)
			require.Equal(t, claim, r.Attempts)
			require.Contains(t, *r.LastError, "replicas behind")
		}
		var failures int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT failures FROM outbox WHERE id = $1", id).Scan(&failures))
		require.Zero(t, failures, "a queue not ready is not the event's failure")
		require.Zero(t, counter(t, b.reg, "newsfeed_outbox_dead_total"))
		eventually(t, func(c *assert.CollectT) {
			_, err := d.DispatchOnce(context.Background())
			require.NoError(c, err)
			require.Equal(c, "published", b.row(t, id).Status)
		})
	})

	t.Run("DeadAfterMaxAttempts", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ids := b.insertEvents(t, 2)
		poison, good := ids[0], ids[1]
		pub := &failingPublisher{next: b.queue, refuse: func(e domain.Event) bool { return e.ID == poison }}
		d := b.dispatcher(t, pub, outbox.Config{
			RedeliverAfter: time.Hour,
			MaxAttempts:    3,
			Backoff:        backoff.Schedule{Base: time.Millisecond, Max: time.Millisecond},
		})

		// Each claim counts an attempt; the tiny backoff makes the row due
		// again at once, so three claims reach MaxAttempts.
		for attempt := 1; attempt <= 3; attempt++ {
			eventually(t, func(c *assert.CollectT) {
				n, err := d.DispatchOnce(context.Background())
				require.Positive(c, n) // the first claim takes the good row too
				require.ErrorIs(c, err, errRefused)
			}, "attempt %d", attempt)
			r := b.row(t, poison)
			require.Equal(t, attempt, r.Attempts)
			if attempt < 3 {
				require.Equal(t, "pending", r.Status, "after attempt %d", attempt)
				require.Zero(t, counter(t, b.reg, "newsfeed_outbox_dead_total"))
			}
		}

		r := b.row(t, poison)
		require.Equal(t, "dead", r.Status)
		require.Equal(t, 3, r.Attempts)
		require.NotNil(t, r.LastError)
		require.Contains(t, *r.LastError, errRefused.Error())
		require.EqualValues(t, 1, counter(t, b.reg, "newsfeed_outbox_dead_total"))
		require.EqualValues(t, 3, counter(t, b.reg, "newsfeed_outbox_publish_failures_total"))

		// The poison row did not hold up the good one, and is never claimed again.
		require.Equal(t, "published", b.row(t, good).Status)
		require.Equal(t, map[int64]int{good: 1}, b.streamIDs(t))
		_, err := b.pool.Exec(t.Context(), `UPDATE outbox SET due_at = now() - interval '1 hour' WHERE id = $1`, poison)
		require.NoError(t, err)
		n, err := d.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)

		// The operator can revive it.
		revived, err := b.db.RetryDead(t.Context(), poison)
		require.NoError(t, err)
		require.EqualValues(t, 1, revived)
		require.Equal(t, "pending", b.row(t, poison).Status)
	})

	t.Run("PublishedRowsWithoutFinishArePublishedAgain", func(t *testing.T) {
		t.Parallel()
		const redeliverAfter = time.Hour
		d, b := setup(t, outbox.Config{RedeliverAfter: redeliverAfter})
		ids := b.insertEvents(t, 2)
		lost, finished := ids[0], ids[1]

		n, err := d.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Equal(t, 2, n)
		// A worker finishes one; the other's ticket is lost.
		require.NoError(t, b.db.Finish(t.Context(), finished))

		// Due again RedeliverAfter after it was published...
		r := b.row(t, lost)
		require.Equal(t, "published", r.Status)
		var dueAfterPublish float64
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`SELECT extract(epoch FROM due_at - published_at)::float8 FROM outbox WHERE id = $1`, lost).Scan(&dueAfterPublish))
		require.InDelta(t, redeliverAfter.Seconds(), dueAfterPublish, 0.001)
		// ...and then, its ticket lost with Redis, it is published again.
		require.NoError(t, b.rdb.Del(t.Context(), b.queue.Stream()).Err())
		b.requireDueAtDeadline(t, d, lost)
		r = b.row(t, lost)
		require.Equal(t, "published", r.Status)
		require.Equal(t, 2, r.Attempts)
		require.Equal(t, map[int64]int{lost: 1}, b.streamIDs(t))

		// A finished row is never published again, however late it is.
		require.Equal(t, "done", b.row(t, finished).Status)
		require.NoError(t, b.db.Finish(t.Context(), lost))
		_, err = b.pool.Exec(t.Context(), `UPDATE outbox SET due_at = now() - interval '1 hour'`)
		require.NoError(t, err)
		n, err = d.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)
		require.EqualValues(t, 1, b.xlen(t))
	})

	t.Run("ClaimOfACrashedDispatcherIsTakenOverAfterLease", func(t *testing.T) {
		t.Parallel()
		d, b := setup(t, outbox.Config{RedeliverAfter: time.Hour})
		ids := b.insertEvents(t, 1)
		// A dispatcher claims the row and dies before publishing it.
		const lease = time.Hour
		claimed, err := b.db.Claim(t.Context(), 10, lease)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.InDelta(t, lease.Seconds(), b.row(t, ids[0]).DueIn.Seconds(), 60, "leased until the lease ends")
		// Not claimed again before the lease ends; claimed once it did.
		b.requireDueAtDeadline(t, d, ids[0])
		r := b.row(t, ids[0])
		require.Equal(t, "published", r.Status)
		require.Equal(t, 2, r.Attempts)
		require.Equal(t, map[int64]int{ids[0]: 1}, b.streamIDs(t))
	})

	t.Run("FailedMarkPublishedIsPublishedAgainAfterLease", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ids := b.insertEvents(t, 1)
		st := &hookedStore{DB: b.db, markPublishedFailures: 1}
		const lease = time.Hour
		d := newDispatcher(t, st, b.queue, outbox.Config{Lease: lease, RedeliverAfter: time.Hour})

		n, err := d.DispatchOnce(t.Context())
		require.Equal(t, 1, n)
		require.ErrorIs(t, err, errStoreDown)
		r := b.row(t, ids[0])
		require.Equal(t, "publishing", r.Status)
		require.InDelta(t, lease.Seconds(), r.DueIn.Seconds(), 60, "leased until the lease ends")
		require.Equal(t, map[int64]int{ids[0]: 1}, b.streamIDs(t))

		// The ticket may be in the queue, but nothing says so: after the
		// lease the row is published again (at least once).
		b.requireDueAtDeadline(t, d, ids[0])
		r = b.row(t, ids[0])
		require.Equal(t, "published", r.Status)
		require.Equal(t, 2, r.Attempts)
		require.Equal(t, map[int64]int{ids[0]: 2}, b.streamIDs(t))
	})

	t.Run("DueRowsWhoseTicketWaitsInTheQueueAreNotPublishedTwice", func(t *testing.T) {
		t.Parallel()
		// Workers are down: the ticket waits in the stream past the deadline.
		d, b := setup(t, outbox.Config{RedeliverAfter: time.Hour})
		ids := b.insertEvents(t, 1)
		n, err := d.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		b.requireDueAtDeadline(t, d, ids[0]) // claimed again, its ticket found waiting
		r := b.row(t, ids[0])
		require.Equal(t, "published", r.Status)
		require.Equal(t, 2, r.Attempts)
		require.Equal(t, map[int64]int{ids[0]: 1}, b.streamIDs(t), "one ticket, not two")
	})

	t.Run("FinishedBeforeMarkedPublishedStaysFinished", func(t *testing.T) {
		t.Parallel()
		// A fast worker may finish a row between Publish and MarkPublished.
		b := newBundle(t)
		ids := b.insertEvents(t, 1)
		pub := publisherFunc{q: b.queue, publish: func(ctx context.Context, events []domain.Event) ([]string, []error) {
			tickets, errs := b.queue.Publish(ctx, events)
			for _, e := range events {
				require.NoError(t, b.db.Finish(ctx, e.ID))
			}
			return tickets, errs
		}}
		d := b.dispatcher(t, pub, outbox.Config{RedeliverAfter: time.Hour})

		n, err := d.DispatchOnce(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, "done", b.row(t, ids[0]).Status)
	})
}

var errStoreDown = errors.New("postgresql is down")

// hookedStore is the real store, except that its first Claims and
// MarkPublisheds fail as if PostgreSQL were unreachable, and, after those,
// its next claimHangs Claims hang until their context ends (a query behind
// a lock that is never released).
type hookedStore struct {
	*store.DB
	mu                    sync.Mutex
	claimFailures         int
	claimHangs            int
	markPublishedFailures int
	claims                int // calls of Claim
}

func (s *hookedStore) Claim(ctx context.Context, limit int, lease time.Duration) ([]domain.Event, error) {
	s.mu.Lock()
	s.claims++
	fail, hang := s.claimFailures > 0, s.claimFailures <= 0 && s.claimHangs > 0
	if fail {
		s.claimFailures--
	} else if hang {
		s.claimHangs--
	}
	s.mu.Unlock()
	switch {
	case fail:
		return nil, fmt.Errorf("claim outbox batch: %w", errStoreDown)
	case hang:
		<-ctx.Done()
		return nil, fmt.Errorf("claim outbox batch: %w", ctx.Err())
	}
	return s.DB.Claim(ctx, limit, lease)
}

func (s *hookedStore) MarkPublished(ctx context.Context, ids []int64, tickets []string, redeliverAfter time.Duration) error {
	s.mu.Lock()
	fail := s.markPublishedFailures > 0
	s.markPublishedFailures--
	s.mu.Unlock()
	if fail {
		return fmt.Errorf("mark outbox rows published: %w", errStoreDown)
	}
	return s.DB.MarkPublished(ctx, ids, tickets, redeliverAfter)
}

// While PostgreSQL fails, the dispatcher backs off, and writes that wake it
// (one NOTIFY a post) do not cut the wait short: the dependency that is down
// would otherwise be hit once per post.
func TestWakeUpsDoNotSkipTheBackoff(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	st := &hookedStore{DB: b.db, claimFailures: 1 << 30}
	wake := make(chan struct{}, 1)
	d := newDispatcher(t, st, b.queue, outbox.Config{PollInterval: time.Hour, RedeliverAfter: time.Hour, Wake: wake})
	stop := runDispatcher(t, d)
	// Posts keep coming for half a second: a wake-up at every chance.
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		select {
		case wake <- struct{}{}:
		default:
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	st.mu.Lock()
	defer st.mu.Unlock()
	// The first claim at once, then 100, 200, 400 ms of backoff (±25 %%
	// jitter is not applied to these): at most a handful of claims.
	require.LessOrEqual(t, st.claims, 6, "claims while the store was down")
}

func TestPassTimeout(t *testing.T) {
	t.Parallel()

	t.Run("AHungClaimEndsAtThePassTimeout", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		st := &hookedStore{DB: b.db, claimHangs: 1}
		d := newDispatcher(t, st, b.queue, outbox.Config{PassTimeout: 100 * time.Millisecond, RedeliverAfter: time.Hour})
		start := time.Now()
		n, err := d.DispatchOnce(t.Context())
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Zero(t, n)
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
		require.Less(t, time.Since(start), 5*time.Second)
	})

	t.Run("RunGoesOnAfterAHungPass", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ids := b.insertEvents(t, 3)
		st := &hookedStore{DB: b.db, claimHangs: 2}
		// A pass long enough for a real claim, publish and record on a
		// loaded machine (a 100 ms one cut a pass in a CI run, and its rows
		// waited out the 30 s lease); a short lease all the same, so that a
		// pass cut anyway gives its rows back within the wait below.
		d := newDispatcher(t, st, b.queue, outbox.Config{
			PollInterval:   10 * time.Millisecond,
			PassTimeout:    time.Second,
			Lease:          2 * time.Second,
			RedeliverAfter: time.Hour,
			Metrics:        outbox.NewMetrics(b.reg),
		})
		runDispatcher(t, d)
		eventually(t, func(c *assert.CollectT) {
			for _, id := range ids {
				require.Equal(c, "published", b.row(c, id).Status)
			}
			// Counted once MarkPublished returned, a moment after the rows show it.
			require.EqualValues(c, len(ids), counter(t, b.reg, "newsfeed_outbox_published_total"))
		})
	})
}

// publisherFunc adapts a function to outbox.Publisher; Holds asks the real queue.
type publisherFunc struct {
	q       *queue.Queue
	publish func(ctx context.Context, events []domain.Event) ([]string, []error)
}

func (f publisherFunc) Publish(ctx context.Context, events []domain.Event) ([]string, []error) {
	return f.publish(ctx, events)
}

func (f publisherFunc) Holds(ctx context.Context, tickets []string) ([]bool, error) {
	return f.q.Holds(ctx, tickets)
}

func TestDispatcherRun(t *testing.T) {
	t.Parallel()

	t.Run("TwoDispatchersPublishEveryRowExactlyOnce", func(t *testing.T) {
		t.Parallel()
		const rows = 2000
		b := newBundle(t)
		ids := b.insertEvents(t, rows)
		cfg := outbox.Config{
			BatchSize:      50, // many small claims, so the two really contend
			PollInterval:   10 * time.Millisecond,
			Lease:          time.Hour,
			RedeliverAfter: time.Hour, // nothing is due again during the test
		}
		reg1, reg2 := prometheus.NewRegistry(), prometheus.NewRegistry()
		cfg.Metrics = outbox.NewMetrics(reg1)
		stop1 := runDispatcher(t, b.dispatcher(t, b.queue, cfg))
		cfg.Metrics = outbox.NewMetrics(reg2)
		stop2 := runDispatcher(t, b.dispatcher(t, b.queue, cfg))

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.Equal(c, rows, b.statusCounts(c)["published"])
		}, 60*time.Second, 20*time.Millisecond)
		stop1()
		stop2()
		p1 := counter(t, reg1, "newsfeed_outbox_published_total")
		p2 := counter(t, reg2, "newsfeed_outbox_published_total")
		t.Logf("dispatcher 1 published %v rows, dispatcher 2 %v", p1, p2)
		require.EqualValues(t, rows, p1+p2)

		require.EqualValues(t, rows, b.xlen(t))
		seen := b.streamIDs(t)
		require.Len(t, seen, rows)
		for _, id := range ids {
			require.Equal(t, 1, seen[id], "outbox id %d in the stream", id)
		}
		var maxAttempts int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT max(attempts) FROM outbox`).Scan(&maxAttempts))
		require.Equal(t, 1, maxAttempts, "a row was claimed twice")
	})

	t.Run("ReturnsPromptlyWhenContextEnds", func(t *testing.T) {
		t.Parallel()
		d, b := setup(t, outbox.Config{PollInterval: time.Hour, RedeliverAfter: time.Hour})
		b.insertEvents(t, 3)
		stop := runDispatcher(t, d)
		// The first pass runs at once, whatever PollInterval.
		eventually(t, func(c *assert.CollectT) {
			require.Equal(c, 3, b.statusCounts(c)["published"])
		})
		stop() // fails the test unless Run returns nil within 10s
	})

	t.Run("ReturnsWhenContextEndedBeforeStart", func(t *testing.T) {
		t.Parallel()
		d, b := setup(t, outbox.Config{RedeliverAfter: time.Hour})
		b.insertEvents(t, 3)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, d.Run(ctx))
	})

	t.Run("WakeDispatchesBeforePollInterval", func(t *testing.T) {
		t.Parallel()
		wake := make(chan struct{}, 1)
		d, b := setup(t, outbox.Config{PollInterval: time.Hour, RedeliverAfter: time.Hour, Wake: wake})
		first := b.insertEvents(t, 1)[0]
		runDispatcher(t, d)
		// The first pass runs at once; after it Run sleeps for an hour.
		eventually(t, func(c *assert.CollectT) {
			require.Equal(c, "published", b.row(c, first).Status)
		})

		second := b.insertEvents(t, 1)[0]
		require.Never(t, func() bool {
			var status string
			err := b.pool.QueryRow(context.Background(), `SELECT status FROM outbox WHERE id = $1`, second).Scan(&status)
			return err != nil || status != "pending"
		}, 200*time.Millisecond, 20*time.Millisecond, "dispatched without a wake-up, before PollInterval")

		wake <- struct{}{}
		eventually(t, func(c *assert.CollectT) {
			require.Equal(c, "published", b.row(c, second).Status)
		})
		require.Equal(t, map[int64]int{first: 1, second: 1}, b.streamIDs(t))
	})

	t.Run("KeepsDispatchingWhileBatchesAreFull", func(t *testing.T) {
		t.Parallel()
		// A full batch means there is probably more: Run claims again at
		// once instead of sleeping PollInterval.
		d, b := setup(t, outbox.Config{BatchSize: 10, PollInterval: time.Hour, RedeliverAfter: time.Hour})
		b.insertEvents(t, 35)
		runDispatcher(t, d)
		eventually(t, func(c *assert.CollectT) {
			require.Equal(c, 35, b.statusCounts(c)["published"])
		})
		require.EqualValues(t, 35, b.xlen(t))
	})

	t.Run("RetriesAfterQueueFailures", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ids := b.insertEvents(t, 5)
		var mu sync.Mutex
		calls := 0
		pub := publisherFunc{q: b.queue, publish: func(ctx context.Context, events []domain.Event) ([]string, []error) {
			mu.Lock()
			calls++
			down := calls <= 2
			mu.Unlock()
			if !down {
				return b.queue.Publish(ctx, events)
			}
			errs := make([]error, len(events))
			for i := range errs {
				errs[i] = fmt.Errorf("queue down: %w", errRefused)
			}
			return make([]string, len(events)), errs
		}}
		d := b.dispatcher(t, pub, outbox.Config{
			PollInterval:   20 * time.Millisecond,
			RedeliverAfter: time.Hour,
			Backoff:        backoff.Schedule{Base: time.Millisecond, Max: time.Millisecond},
		})
		runDispatcher(t, d)
		eventually(t, func(c *assert.CollectT) {
			require.Equal(c, 5, b.statusCounts(c)["published"])
		})
		for _, id := range ids {
			// Two refused claims, then the one that went through.
			require.Equal(t, 3, b.row(t, id).Attempts, "row %d", id)
		}
		require.Len(t, b.streamIDs(t), 5)
	})
}

func TestDispatcherRunStoreFailures(t *testing.T) {
	t.Parallel()

	t.Run("KeepsRetryingWhileTheDatabaseFails", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ids := b.insertEvents(t, 5)
		st := &hookedStore{DB: b.db, claimFailures: 3}
		d := newDispatcher(t, st, b.queue, outbox.Config{PollInterval: 10 * time.Millisecond, RedeliverAfter: time.Hour})
		runDispatcher(t, d)
		eventually(t, func(c *assert.CollectT) {
			require.Equal(c, 5, b.statusCounts(c)["published"])
		})
		for _, id := range ids {
			require.Equal(t, 1, b.row(t, id).Attempts, "row %d", id)
		}
		require.Len(t, b.streamIDs(t), 5)
	})
}

func TestAttempts(t *testing.T) {
	t.Parallel()

	t.Run("RedeliveriesOfLostTicketsDoNotCountAsFailures", func(t *testing.T) {
		t.Parallel()
		// API.md: an event that keeps failing is retried with backoff, then
		// parked dead after a bounded number of attempts. An event whose
		// tickets were lost (workers down, Redis restarted) but that never
		// failed should not die of its first failure.
		const maxAttempts = 3
		b := newBundle(t)
		ids := b.insertEvents(t, 1)
		var refuse sync.Map
		pub := &failingPublisher{next: b.queue, refuse: func(e domain.Event) bool {
			_, ok := refuse.Load(e.ID)
			return ok
		}}
		d := b.dispatcher(t, pub, outbox.Config{
			RedeliverAfter: time.Hour,
			MaxAttempts:    maxAttempts,
			Backoff:        backoff.Schedule{Base: time.Minute, Max: time.Hour},
		})
		// Published, and redelivered maxAttempts-2 times because no worker
		// finished it.
		for publication := range maxAttempts - 1 {
			if publication > 0 {
				b.expire(t, ids[0]) // RedeliverAfter passed
			}
			require.NoError(t, b.rdb.Del(t.Context(), b.queue.Stream()).Err()) // the ticket is lost
			n, err := d.DispatchOnce(t.Context())
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}
		// Then, its ticket lost again, the queue refuses it once.
		b.expire(t, ids[0])
		require.NoError(t, b.rdb.Del(t.Context(), b.queue.Stream()).Err())
		refuse.Store(ids[0], true)
		n, err := d.DispatchOnce(t.Context())
		require.ErrorIs(t, err, errRefused)
		require.Equal(t, 1, n)

		r := b.row(t, ids[0])
		require.Equal(t, "pending", r.Status, "one failure after %d publications is not death", r.Attempts)
		require.Zero(t, counter(t, b.reg, "newsfeed_outbox_dead_total"))
	})
}

// DeleteFinished is the store call the Cleaner loops over (cleaner_test.go
// tests the Cleaner itself).
func TestDeleteFinished(t *testing.T) {
	t.Parallel()

	t.Run("DeletesOnlyRowsFinishedBeforeRetention", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		rows, err := b.pool.Query(t.Context(), `
INSERT INTO outbox (event_type, payload, status, finished_at) VALUES
    ('post.created', '{}', 'done', now() - interval '2 hours'),
    ('post.created', '{}', 'done', now() - interval '1 minute'),
    ('post.created', '{}', 'pending', NULL),
    ('post.created', '{}', 'published', NULL),
    ('post.created', '{}', 'dead', NULL)
RETURNING id`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)

		n, err := b.db.DeleteFinished(t.Context(), time.Hour, 1000)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)

		var left []int64
		rows, err = b.pool.Query(t.Context(), `SELECT id FROM outbox ORDER BY id`)
		require.NoError(t, err)
		left, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Equal(t, ids[1:], left)
	})

	t.Run("DeletesAtMostLimit", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		_, err := b.pool.Exec(t.Context(), `
INSERT INTO outbox (event_type, payload, status, finished_at)
SELECT 'post.created', '{}', 'done', now() - interval '2 days' FROM generate_series(1, 5)`)
		require.NoError(t, err)
		for _, want := range []int64{2, 2, 1, 0} {
			n, err := b.db.DeleteFinished(t.Context(), 24*time.Hour, 2)
			require.NoError(t, err)
			require.Equal(t, want, n)
		}
	})
}
