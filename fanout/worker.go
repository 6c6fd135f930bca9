// Package fanout is the worker side of delivery: it takes tickets from the
// queue, applies each event to the feeds it touches (a new post goes into
// every follower's feed, a deleted one leaves them, a follow merges the
// followee's recent posts, an unfollow removes them), reports the event
// finished in the outbox, and only then acknowledges the ticket.
//
// Every step is idempotent, so a ticket delivered twice — after a crash, a
// lease expiry, a lost acknowledgement — changes nothing the second time.
//
// Where things are: worker.go is what the worker needs (Graph, Feeds,
// Outbox, Queue), New and the Run loop that takes tickets; config.go is
// Config, its defaults and its validation; ticket.go is a ticket's life
// (process, finish, bury, ack, heartbeat); events.go routes an event to its
// handler and names the outcomes; post.go is a post's fan-out (post.created,
// its chunks, post.deleted); follow.go is follow.created and follow.deleted;
// metrics.go and pending.go are the Prometheus metrics.
package fanout

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/internal/health"
)

// Graph is what the worker reads from the social graph.
type Graph interface {
	// FollowerIDRange returns up to limit follower ids of authorID in
	// (after, until], ascending.
	FollowerIDRange(ctx context.Context, authorID, after, until int64, limit int) ([]int64, error)
	// ChunkBoundaries returns the follower ids that end each full chunk of
	// size followers, ascending.
	ChunkBoundaries(ctx context.Context, authorID int64, size int) ([]int64, error)
	// FollowState returns whether follower follows followee now, with the
	// version of the follower's graph it was read at.
	FollowState(ctx context.Context, follower, followee int64) (domain.EdgeState, error)
	// HideStates returns whether each of the two users' feeds hides the
	// other now, with the versions of their graphs.
	HideStates(ctx context.Context, a, b int64) ([]domain.HideState, error)
	// MarkPulled records, for good, that a user's posts are pulled at read time.
	MarkPulled(ctx context.Context, userID int64) error
	// PostFacts tells, in one round trip, whether a post exists, its author,
	// whether it is deleted, the author's reach, and the write position
	// before which every change is seen by the pages read after it.
	PostFacts(ctx context.Context, postID int64) (domain.PostFacts, error)
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
	// Push adds an entry to the existing feeds among followers whose
	// readers follow its author now, and returns how many gained it and
	// whose feeds hold it.
	// asOf is the Graph's write position read before the followers were.
	// first says that no feed can hold the post yet (the first delivery of
	// its fan-out), which lets the feeds take it without looking.
	Push(ctx context.Context, e domain.Entry, followers []int64, asOf int64, first bool) (domain.PushResult, error)
	// ApplyFollow applies a follow state to the follower's feed unless a
	// newer one is there (applied is false then): a follow merges the
	// followee's recent posts (added: how many were new), an unfollow
	// removes them.
	ApplyFollow(ctx context.Context, st domain.EdgeState) (added int, applied bool, err error)
	// ApplyHide applies a hide state to the reader's feed unless a newer
	// one is there.
	ApplyHide(ctx context.Context, st domain.HideState) (applied bool, err error)
	// Remove takes posts out of the feeds of users.
	Remove(ctx context.Context, users []int64, postIDs []int64) error
	// ForgetPost hides a deleted post from every read at once.
	ForgetPost(ctx context.Context, postID int64) error
	// IsCelebrity tells whether an author with this many followers is pulled
	// into feeds at read time instead of fanned out.
	IsCelebrity(followers int64) bool
	// AddToTimeline and RemoveFromTimeline keep a celebrity's timeline.
	AddToTimeline(ctx context.Context, e domain.Entry) error
	RemoveFromTimeline(ctx context.Context, e domain.Entry) error
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
	// Postpone schedules a retry after retryIn without counting a failure:
	// a dependency was not ready for the work (domain.ErrUnavailable).
	Postpone(ctx context.Context, id int64, retryIn time.Duration, cause string) error
	// Bury parks the event dead at once.
	Bury(ctx context.Context, id int64, cause string) error
	// Extend postpones redelivery of an event whose fan-out is still running.
	Extend(ctx context.Context, id int64, by time.Duration) error
}

// Queue is where tickets come from.
type Queue interface {
	// Read takes up to count new tickets, waiting up to block for the first.
	// It may return tickets together with an error (some of the queue's
	// partitions failed): the tickets are the consumer's all the same.
	Read(ctx context.Context, consumer string, count int, block time.Duration) ([]domain.Delivery, error)
	// ClaimStale takes over up to count tickets that other consumers held
	// idle for minIdle; like Read it may return tickets with an error.
	ClaimStale(ctx context.Context, consumer string, minIdle time.Duration, count int) ([]domain.Delivery, error)
	Touch(ctx context.Context, consumer, messageID string) error
	Ack(ctx context.Context, messageID string) error
	DeadLetter(ctx context.Context, t domain.Delivery, cause string) error
}

// Outages tells whether a known outage of a dependency explains an error
// (health.Watch).
type Outages interface {
	// Explained reports whether err is explained by a dependency outage
	// that is already logged.
	Explained(ctx context.Context, err error) bool
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
	tracer  trace.Tracer
	tracing bool // Config.TracerProvider was set: pages get spans
}

// instrumentationName names the worker's tracer.
const instrumentationName = "github.com/newsfeed/newsfeed/fanout"

// New builds a worker. It returns an error, naming the field, if a value of
// cfg is out of range; zero fields take their defaults (see Config).
func New(graph Graph, feeds Feeds, ob Outbox, q Queue, cfg Config) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tracing := cfg.TracerProvider != nil
	cfg.setDefaults()
	return &Worker{graph: graph, feeds: feeds, outbox: ob, queue: q, cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics,
		tracer: cfg.TracerProvider.Tracer(instrumentationName), tracing: tracing}, nil
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
		if time.Since(lastClaim) > w.cfg.ClaimInterval {
			lastClaim = time.Now()
			tickets, err = w.queue.ClaimStale(ctx, w.cfg.Consumer, w.cfg.ClaimIdle, free)
			if len(tickets) > 0 {
				w.log.Info("took over stale tickets", zap.Int("count", len(tickets)))
			}
		}
		if err == nil && len(tickets) == 0 {
			tickets, err = w.queue.Read(ctx, w.cfg.Consumer, free, time.Second)
		}
		// Tickets come with an error when some partitions failed and others
		// answered: they are this consumer's, to process all the same.
		for _, t := range tickets {
			start(t)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			wait := errWait.Next()
			health.Log(ctx, w.cfg.Outages, w.log, "reading tickets failed; retrying", err, zap.Duration("retry_in", wait))
			backoff.Sleep(ctx, wait)
			continue
		}
		errWait.Reset()
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
