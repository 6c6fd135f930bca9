// Package fanout is the worker side of delivery: it takes tickets from the
// queue, applies each event to the feeds it touches (a new post goes into
// every follower's feed, a deleted one leaves them, a follow merges the
// followee's recent posts, an unfollow removes them), reports the event
// finished in the outbox, and only then acknowledges the ticket.
//
// Every step is idempotent, so a ticket delivered twice — after a crash, a
// lease expiry, a lost acknowledgement — changes nothing the second time.
package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/backoff"
)

// Graph is what the worker reads from the social graph.
type Graph interface {
	// FollowerIDRange returns up to limit follower ids of authorID in
	// (after, until], ascending.
	FollowerIDRange(ctx context.Context, authorID, after, until int64, limit int) ([]int64, error)
	// ChunkBoundaries returns the follower ids that end each full chunk of
	// size followers, ascending.
	ChunkBoundaries(ctx context.Context, authorID int64, size int) ([]int64, error)
	// IsFollowing reports whether follower follows followee now.
	IsFollowing(ctx context.Context, follower, followee int64) (bool, error)
	// Reach returns how many followers a user has (a maintained count) and
	// whether their posts were ever pulled at read time.
	Reach(ctx context.Context, userID int64) (followers int64, pulled bool, err error)
	// MarkPulled records, for good, that a user's posts are pulled at read time.
	MarkPulled(ctx context.Context, userID int64) error
	// PostStatus tells whether a post exists, its author and whether it is deleted.
	PostStatus(ctx context.Context, postID int64) (authorID int64, deleted, found bool, err error)
	// MarkPostPulled records that a post went to its author's timeline and
	// to no feed, if eventID (its post.created) was not handled before.
	MarkPostPulled(ctx context.Context, postID, eventID int64) error
	// MarkPostPushed records, for good, that a post goes into feeds.
	MarkPostPushed(ctx context.Context, postID int64) error
	// PostPulledOnly reports whether a post went to its author's timeline and to no feed.
	PostPulledOnly(ctx context.Context, postID int64) (bool, error)
}

// Feeds is what the worker writes.
type Feeds interface {
	// Push adds a post by authorID to the existing feeds among followers
	// whose readers follow the author now, and returns how many gained it.
	Push(ctx context.Context, authorID, postID int64, followers []int64) (int, error)
	// Followed merges the followee's recent posts into the follower's feed
	// and returns how many were new.
	Followed(ctx context.Context, follower, followee int64) (int, error)
	// Unfollowed removes the followee's posts from the follower's feed.
	Unfollowed(ctx context.Context, follower, followee int64) error
	// Remove takes posts out of the feeds of users.
	Remove(ctx context.Context, users []int64, postIDs []int64) error
	// ForgetPost hides a deleted post from every read at once.
	ForgetPost(ctx context.Context, postID int64) error
	// IsCelebrity tells whether an author with this many followers is pulled
	// into feeds at read time instead of fanned out.
	IsCelebrity(followers int64) bool
	// AddToTimeline and RemoveFromTimeline keep a celebrity's timeline.
	AddToTimeline(ctx context.Context, authorID, postID int64) error
	RemoveFromTimeline(ctx context.Context, authorID, postID int64) error
}

// Outbox is how the worker reports the outcome of an event.
type Outbox interface {
	// FinishEvent marks the event's fan-out finished and reports whether
	// this call did (not a redelivery of a finished event) and then the
	// delivery latency, measured on the database clock.
	FinishEvent(ctx context.Context, id int64) (finished bool, latency time.Duration, err error)
	// SplitFanout writes the chunks of a big fan-out as events of their own
	// and parks the parent until they are done; it returns the chunk count.
	SplitFanout(ctx context.Context, parentID int64, chunks []domain.ChunkPayload) (int, error)
	// FinishChunk finishes a chunk and reports whether this call finished
	// its post's fan-out, and then the delivery latency (database clock).
	FinishChunk(ctx context.Context, id int64) (parentDone bool, latency time.Duration, err error)
	// Fail schedules a retry after retryIn, or parks the event dead after maxAttempts.
	Fail(ctx context.Context, id int64, maxAttempts int, retryIn time.Duration, cause string) (dead bool, err error)
	// Bury parks the event dead at once.
	Bury(ctx context.Context, id int64, cause string) error
	// Extend postpones redelivery of an event whose fan-out is still running.
	Extend(ctx context.Context, id int64, by time.Duration) error
}

// Queue is where tickets come from.
type Queue interface {
	Read(ctx context.Context, consumer string, count int, block time.Duration) ([]domain.Delivery, error)
	ClaimStale(ctx context.Context, consumer string, minIdle time.Duration, count int) ([]domain.Delivery, error)
	Touch(ctx context.Context, consumer, messageID string) error
	Ack(ctx context.Context, messageID string) error
	DeadLetter(ctx context.Context, t domain.Delivery, cause string) error
}

// Config configures a Worker. Zero fields take the defaults named.
type Config struct {
	// Concurrency is tickets processed at once. Defaults to 64.
	Concurrency int
	// PageSize is followers read and written per round trip. Defaults to 1000.
	PageSize int
	// ChunkSize: a fan-out to more followers is split into chunks of this
	// many that any worker can take (fanout.chunk_size). Defaults to 5000.
	ChunkSize int
	// ClaimIdle is when a ticket held by a silent consumer is taken over;
	// the worker touches its own tickets well within it. Defaults to 30s.
	ClaimIdle time.Duration
	// MaxDeliveries: a ticket delivered more often (its workers keep dying)
	// is dead-lettered. Defaults to 5.
	MaxDeliveries int64
	// MaxAttempts before a failing event is dead. Defaults to 10.
	MaxAttempts int
	// Backoff spaces retries of a failing event. Defaults to backoff.DefaultSchedule.
	Backoff backoff.Schedule
	// RedeliverAfter is how far each heartbeat pushes the outbox row's
	// redelivery deadline. Defaults to 2m.
	RedeliverAfter time.Duration
	// ShutdownTimeout is how long Run lets in-flight tickets finish after its
	// context ends before cancelling them (they are redelivered). Defaults to 15s.
	ShutdownTimeout time.Duration
	// Consumer names this worker in the consumer group. Defaults to host-pid.
	Consumer string
	// Metrics to update. Defaults to unregistered ones.
	Metrics *Metrics
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
}

func (c *Config) setDefaults() {
	setDefault(&c.Concurrency, 64)
	setDefault(&c.PageSize, 1000)
	setDefault(&c.ChunkSize, 5000)
	setDefault(&c.ClaimIdle, 30*time.Second)
	setDefault(&c.MaxDeliveries, 5)
	setDefault(&c.MaxAttempts, 10)
	setDefault(&c.RedeliverAfter, 2*time.Minute)
	setDefault(&c.ShutdownTimeout, 15*time.Second)
	if c.Backoff == (backoff.Schedule{}) {
		c.Backoff = backoff.DefaultSchedule
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		c.Consumer = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()%1e6)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Worker consumes tickets and writes feeds.
type Worker struct {
	graph   Graph
	feeds   Feeds
	outbox  Outbox
	queue   Queue
	cfg     Config
	log     *zap.Logger
	metrics *Metrics
}

// Metrics are the worker's Prometheus metrics. Every role registers them, so
// that every process exports the names API.md lists; a process that does no
// fan-out exports zeros.
type Metrics struct {
	entries  prometheus.Counter
	delivery prometheus.Histogram
	tickets  *prometheus.CounterVec
}

// NewMetrics builds the worker metrics and registers them with reg, if not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_fanout_entries_total", Help: "Feed entries written by fan-out (repeats of an entry not counted).",
		}),
		delivery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "newsfeed_delivery_seconds",
			Help:    "Time from a post's creation to the end of its fan-out.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15),
		}),
		tickets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "newsfeed_fanout_tickets_total", Help: "Tickets processed, by event type and outcome.",
		}, []string{"type", "outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.entries, m.delivery, m.tickets)
	}
	return m
}

// New builds a worker.
func New(graph Graph, feeds Feeds, ob Outbox, q Queue, cfg Config) *Worker {
	cfg.setDefaults()
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Worker{graph: graph, feeds: feeds, outbox: ob, queue: q, cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics}
}

// Run processes tickets until ctx ends, then lets in-flight tickets finish
// for up to ShutdownTimeout and cancels the rest, which stay unacknowledged
// and are redelivered. Failures of Redis or PostgreSQL are retried.
func (w *Worker) Run(ctx context.Context) error {
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	slots := make(chan struct{}, w.cfg.Concurrency)
	var inFlight sync.WaitGroup
	start := func(t domain.Delivery) {
		slots <- struct{}{}
		inFlight.Add(1)
		go func() {
			defer func() { <-slots; inFlight.Done() }()
			w.process(workCtx, t)
		}()
	}

	lastClaim := time.Time{}
	var errWait backoff.Doubling
	for ctx.Err() == nil {
		// Wait for a free slot, then take as many tickets as there are slots.
		select {
		case slots <- struct{}{}:
			<-slots
		case <-ctx.Done():
			continue
		}
		free := w.cfg.Concurrency - len(slots)
		var tickets []domain.Delivery
		var err error
		if time.Since(lastClaim) > w.cfg.ClaimIdle/2 {
			lastClaim = time.Now()
			tickets, err = w.queue.ClaimStale(ctx, w.cfg.Consumer, w.cfg.ClaimIdle, free)
			if len(tickets) > 0 {
				w.log.Info("took over stale tickets", zap.Int("count", len(tickets)))
			}
		}
		if err == nil && len(tickets) == 0 {
			tickets, err = w.queue.Read(ctx, w.cfg.Consumer, free, time.Second)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			wait := errWait.Next()
			w.log.Warn("reading tickets failed; retrying", zap.Error(err), zap.Duration("retry_in", wait))
			backoff.Sleep(ctx, wait)
			continue
		}
		errWait.Reset()
		for _, t := range tickets {
			start(t)
		}
	}

	w.log.Info("stopped taking tickets; waiting for those in flight",
		zap.Int("in_flight", len(slots)), zap.Duration("timeout", w.cfg.ShutdownTimeout))
	done := make(chan struct{})
	go func() { inFlight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownTimeout):
		w.log.Warn("shutdown timeout: abandoning in-flight tickets to redelivery")
		cancelWork()
		<-done
	}
	return nil
}

// process handles one ticket from start to acknowledgement.
func (w *Worker) process(ctx context.Context, t domain.Delivery) {
	log := w.log.With(zap.Int64("outbox_id", t.ID), zap.String("type", t.Type), zap.String("message_id", t.MessageID))
	if t.Deliveries > w.cfg.MaxDeliveries {
		w.bury(ctx, log, t, fmt.Sprintf("delivered %d times without finishing", t.Deliveries))
		return
	}

	stopHeartbeat := w.heartbeat(ctx, log, t)
	err := w.handle(ctx, t)
	stopHeartbeat()

	switch {
	case ctx.Err() != nil:
		w.metrics.tickets.WithLabelValues(t.Type, "abandoned").Inc()
		return // shutting down: the ticket stays pending and is redelivered
	case errors.Is(err, errSplit):
		// The chunks are events of their own now; the parent finishes with
		// the last of them.
		w.ack(ctx, log, t)
		w.metrics.tickets.WithLabelValues(t.Type, "split").Inc()
	case err == nil:
		if err := w.finish(ctx, t); err != nil {
			log.Warn("cannot record finished fan-out; the ticket will be redelivered", zap.Error(err))
			return
		}
		w.ack(ctx, log, t)
		w.metrics.tickets.WithLabelValues(t.Type, "done").Inc()
	case errors.As(err, new(*permanentError)):
		w.bury(ctx, log, t, err.Error())
	default:
		w.metrics.tickets.WithLabelValues(t.Type, "failed").Inc()
		dead, ferr := w.outbox.Fail(ctx, t.ID, w.cfg.MaxAttempts, w.cfg.Backoff.Delay(t.Failures+1), err.Error())
		if ferr != nil {
			log.Warn("fan-out failed and cannot be rescheduled; the ticket will be redelivered",
				zap.Error(err), zap.NamedError("outbox_error", ferr))
			return
		}
		if dead {
			log.Error("fan-out failed for the last time; event is dead", zap.Error(err))
			if err := w.queue.DeadLetter(ctx, t, err.Error()); err != nil {
				log.Warn("cannot dead-letter ticket", zap.Error(err))
			}
			return
		}
		log.Warn("fan-out failed; the dispatcher will publish it again after a backoff", zap.Error(err))
		w.ack(ctx, log, t) // the outbox row is pending again and owns the retry
	}
}

// finish records the event finished and observes the delivery latency of a
// post whose fan-out this call completed: once per post, however often its
// tickets are delivered.
func (w *Worker) finish(ctx context.Context, t domain.Delivery) error {
	var done bool
	var latency time.Duration
	var err error
	if t.Type == domain.FanoutChunk {
		done, latency, err = w.outbox.FinishChunk(ctx, t.ID)
	} else {
		done, latency, err = w.outbox.FinishEvent(ctx, t.ID)
	}
	delivers := t.Type == domain.PostCreated || t.Type == domain.FanoutChunk
	if err == nil && done && delivers {
		w.metrics.delivery.Observe(latency.Seconds())
	}
	return err
}

// errSplit says that a fan-out was split into chunks instead of done.
var errSplit = errors.New("fan-out split into chunks")

func (w *Worker) bury(ctx context.Context, log *zap.Logger, t domain.Delivery, cause string) {
	w.metrics.tickets.WithLabelValues(t.Type, "dead").Inc()
	log.Error("event is dead", zap.String("cause", cause))
	if err := w.outbox.Bury(ctx, t.ID, cause); err != nil {
		log.Warn("cannot park event as dead; the ticket will be redelivered", zap.Error(err))
		return
	}
	if err := w.queue.DeadLetter(ctx, t, cause); err != nil {
		log.Warn("cannot dead-letter ticket", zap.Error(err))
	}
}

func (w *Worker) ack(ctx context.Context, log *zap.Logger, t domain.Delivery) {
	if err := w.queue.Ack(ctx, t.MessageID); err != nil {
		// Harmless: the ticket is redelivered and its fan-out changes nothing.
		log.Warn("cannot acknowledge ticket", zap.Error(err))
	}
}

// heartbeat keeps a long fan-out from being taken over (queue) or published
// again (outbox) while this worker is still on it.
func (w *Worker) heartbeat(ctx context.Context, log *zap.Logger, t domain.Delivery) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(w.cfg.ClaimIdle / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := w.queue.Touch(ctx, w.cfg.Consumer, t.MessageID); err != nil && ctx.Err() == nil {
					log.Warn("heartbeat to queue failed", zap.Error(err))
				}
				if err := w.outbox.Extend(ctx, t.ID, w.cfg.RedeliverAfter); err != nil && ctx.Err() == nil {
					log.Warn("heartbeat to outbox failed", zap.Error(err))
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// permanentError marks an event that no retry can fix (malformed payload,
// unknown type): it is parked dead at once.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(format string, args ...any) error {
	return &permanentError{fmt.Errorf(format, args...)}
}

// handle applies one event to the feeds.
func (w *Worker) handle(ctx context.Context, t domain.Delivery) error {
	switch t.Type {
	case domain.PostCreated, domain.PostDeleted:
		var p domain.PostPayload
		if err := json.Unmarshal(t.Payload, &p); err != nil || p.PostID <= 0 || p.AuthorID <= 0 {
			return permanent("malformed %s payload %q", t.Type, t.Payload)
		}
		if t.Type == domain.PostCreated {
			return w.pushPost(ctx, t, p)
		}
		return w.removePost(ctx, p)
	case domain.FanoutChunk:
		var c domain.ChunkPayload
		if err := json.Unmarshal(t.Payload, &c); err != nil || c.PostID <= 0 || c.AuthorID <= 0 || c.After < 0 || c.Until < 0 {
			return permanent("malformed %s payload %q", t.Type, t.Payload)
		}
		return w.pushChunk(ctx, c)
	case domain.FollowCreated, domain.FollowDeleted:
		var p domain.FollowPayload
		if err := json.Unmarshal(t.Payload, &p); err != nil || p.FollowerID <= 0 || p.FolloweeID <= 0 {
			return permanent("malformed %s payload %q", t.Type, t.Payload)
		}
		return w.applyFollow(ctx, p) // either event: the state now decides
	default:
		return permanent("unknown event type %q", t.Type)
	}
}

// eachFollowerPage calls fn with the author's followers, one keyset page at
// a time: memory stays flat however many followers there are. The next page
// is read from PostgreSQL while fn writes the current one to Redis.
func (w *Worker) eachFollowerPage(ctx context.Context, authorID, after, until int64, fn func([]int64) error) error {
	type page struct {
		ids []int64
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan page, 1)
	go func() {
		defer close(pages)
		if until <= 0 {
			until = math.MaxInt64
		}
		for {
			ids, err := w.graph.FollowerIDRange(ctx, authorID, after, until, w.cfg.PageSize)
			select {
			case pages <- page{ids, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || len(ids) < w.cfg.PageSize {
				return
			}
			after = ids[len(ids)-1]
		}
	}()
	for p := range pages {
		if p.err != nil {
			return p.err
		}
		if len(p.ids) == 0 {
			return nil
		}
		if err := fn(p.ids); err != nil {
			return err
		}
	}
	return nil
}

// deliverable checks that the post is there to deliver: missing is an error
// worth retrying (a replica may lag, an operator may restore it), by
// somebody else is a malformed event, deleted is nothing to do.
func (w *Worker) deliverable(ctx context.Context, postID, authorID int64) (bool, error) {
	author, deleted, found, err := w.graph.PostStatus(ctx, postID)
	switch {
	case err != nil:
		return false, err
	case !found:
		return false, fmt.Errorf("post %d does not exist", postID)
	case author != authorID:
		return false, permanent("post %d is by user %d, not %d", postID, author, authorID)
	}
	return !deleted, nil // a deleted post: post.deleted cleans what was
}

// pushPost delivers a new post: into its author's timeline if the author
// is a celebrity, else into the followers' feeds (and the timeline too for a
// former celebrity). What the post's delete must clean is recorded first: a
// pulled post is in no feed, unless another handling of its event (one
// before, or a redelivery after the author fell below the threshold) pushed
// it. Only a first handling can know that none did before it, and a later
// one that pushes (or any push of a former celebrity's post, whose earlier
// handling may have been a pull) marks the post pushed for good.
func (w *Worker) pushPost(ctx context.Context, t domain.Delivery, p domain.PostPayload) error {
	if ok, err := w.deliverable(ctx, p.PostID, p.AuthorID); !ok {
		return err
	}
	followers, pulled, err := w.graph.Reach(ctx, p.AuthorID)
	if err != nil {
		return err
	}
	first := t.Deliveries <= 1 && t.Attempt <= 1 && t.Failures == 0
	if w.feeds.IsCelebrity(followers) { // pulled at read time: one write, not millions
		if !pulled {
			if err := w.graph.MarkPulled(ctx, p.AuthorID); err != nil {
				return err
			}
		}
		if first {
			if err := w.graph.MarkPostPulled(ctx, p.PostID, t.ID); err != nil {
				return err
			}
		}
		return w.feeds.AddToTimeline(ctx, p.AuthorID, p.PostID)
	}
	if pulled || !first {
		if err := w.graph.MarkPostPushed(ctx, p.PostID); err != nil {
			return err
		}
	}
	if pulled {
		// A former celebrity: readers still merge the timeline (it holds
		// the posts that went nowhere else), so it must stay complete.
		if err := w.feeds.AddToTimeline(ctx, p.AuthorID, p.PostID); err != nil {
			return err
		}
	}
	if followers > int64(w.cfg.ChunkSize) {
		return w.split(ctx, t.ID, p)
	}
	return w.push(ctx, p.PostID, p.AuthorID, 0, 0)
}

// split turns a big fan-out into chunks of ChunkSize followers, each an
// outbox event that any worker can take and that is retried on its own.
func (w *Worker) split(ctx context.Context, eventID int64, p domain.PostPayload) error {
	bounds, err := w.graph.ChunkBoundaries(ctx, p.AuthorID, w.cfg.ChunkSize)
	if err != nil {
		return err
	}
	chunks := make([]domain.ChunkPayload, 0, len(bounds)+1)
	after := int64(0)
	for _, b := range bounds {
		chunks = append(chunks, domain.ChunkPayload{PostID: p.PostID, AuthorID: p.AuthorID, After: after, Until: b})
		after = b
	}
	chunks = append(chunks, domain.ChunkPayload{PostID: p.PostID, AuthorID: p.AuthorID, After: after})
	if _, err := w.outbox.SplitFanout(ctx, eventID, chunks); err != nil {
		return err
	}
	return errSplit
}

func (w *Worker) pushChunk(ctx context.Context, c domain.ChunkPayload) error {
	if ok, err := w.deliverable(ctx, c.PostID, c.AuthorID); !ok {
		return err
	}
	return w.push(ctx, c.PostID, c.AuthorID, c.After, c.Until)
}

// push writes a post into the feeds of the author's followers in (after,
// until] (until 0: no bound).
func (w *Worker) push(ctx context.Context, postID, authorID, after, until int64) error {
	return w.eachFollowerPage(ctx, authorID, after, until, func(followers []int64) error {
		added, err := w.feeds.Push(ctx, authorID, postID, followers)
		w.metrics.entries.Add(float64(added))
		return err
	})
}

func (w *Worker) removePost(ctx context.Context, p domain.PostPayload) error {
	if err := w.feeds.ForgetPost(ctx, p.PostID); err != nil {
		return err
	}
	if err := w.feeds.RemoveFromTimeline(ctx, p.AuthorID, p.PostID); err != nil {
		return err
	}
	// A celebrity's post went to the timeline only: no follower's feed
	// has it, and a ZREM to each of millions of feeds would find nothing.
	if only, err := w.graph.PostPulledOnly(ctx, p.PostID); err != nil || only {
		return err
	}
	return w.eachFollowerPage(ctx, p.AuthorID, 0, 0, func(followers []int64) error {
		return w.feeds.Remove(ctx, followers, []int64{p.PostID})
	})
}

// applyFollow applies the follow state as it is now, not as the event says
// (follow.created and follow.deleted alike), so that events handled late,
// twice or out of order (an unfollow before its follow) cannot leave an
// unfollowed author in a feed: it reads the state first and applies it, so a
// follow.created handled after the unfollow merges nothing, not even for a
// moment, and a follow.deleted handled after a new follow removes nothing. A
// change committed while the state is applied is seen by the check after the
// write, and applied in turn; a change committed later runs its own clean-up
// (in the API and in its event) after this write, so nothing slips between.
func (w *Worker) applyFollow(ctx context.Context, p domain.FollowPayload) error {
	following, err := w.graph.IsFollowing(ctx, p.FollowerID, p.FolloweeID)
	if err != nil {
		return err
	}
	for range maxFollowRounds {
		if following {
			added, err := w.feeds.Followed(ctx, p.FollowerID, p.FolloweeID)
			w.metrics.entries.Add(float64(added))
			if err != nil {
				return err
			}
		} else if err := w.feeds.Unfollowed(ctx, p.FollowerID, p.FolloweeID); err != nil {
			return err
		}
		now, err := w.graph.IsFollowing(ctx, p.FollowerID, p.FolloweeID)
		if err != nil || now == following {
			return err
		}
		following = now
	}
	return fmt.Errorf("follow of %d by %d keeps changing", p.FolloweeID, p.FollowerID)
}

// maxFollowRounds bounds how often applyFollow applies a state that keeps
// changing under it; the event then fails and is retried after a backoff.
const maxFollowRounds = 4
