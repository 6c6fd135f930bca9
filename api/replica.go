package api

import (
	"cmp"
	"context"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/logctx"
)

// Listings are the reads users page through, which database.read_url sends
// to a replica.
type Listings interface {
	Followers(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)
	Following(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error)
	AuthorPosts(ctx context.Context, authorID, before int64, limit int) ([]domain.Post, error)
}

// WritePositions remember, per user, the primary's log position after their
// last write, shared by every serve process (sticky.Positions, in Redis, for
// sticky.TTL).
type WritePositions interface {
	// Record notes that user's write committed at or below lsn.
	Record(ctx context.Context, user, lsn int64) error
	// Get returns user's position; found is false when they wrote nothing
	// lately. An error: it cannot be told.
	Get(ctx context.Context, user int64) (lsn int64, found bool, err error)
}

// Replication tells how far the primary's log goes and how far the replica
// has replayed it (store.DB).
type Replication interface {
	// WritePosition returns the primary's log position: every write
	// committed before the call is at or below it.
	WritePosition(ctx context.Context) (int64, error)
	// Replayed reports whether the replica has replayed the log up to lsn.
	Replayed(ctx context.Context, lsn int64) (bool, error)
}

// ReadYourWrites keeps a caller's listings on the primary while the replica
// has not replayed the caller's own recent writes. All three are required.
type ReadYourWrites struct {
	Positions   WritePositions
	Replication Replication
	// Primary reads the listings on the primary.
	Primary Listings

	// checkWait replaces positionWait when set (SetCheckWait, for tests
	// whose point is which check answered, not how fast).
	checkWait time.Duration
}

// positionWait bounds each look at a write position (Redis) and at the
// replica's progress: a dependency slower than this counts as down, and a
// read that cannot be checked goes to the primary rather than wait.
const positionWait = 250 * time.Millisecond

// The reasons a listing that would read the replica reads the primary.
const (
	reasonLagging   = "lagging"   // the replica has not replayed the caller's recent write
	reasonUnchecked = "unchecked" // Redis or the replica did not answer the check in time
)

// stickyReads routes listings and records write positions. A user with no
// write within sticky.TTL costs one Redis GET per listing and no PostgreSQL
// query; one with a recent write also one look at the replica's progress.
// While Redis is known to be down (outages), neither is tried: listings read
// the primary and positions go unrecorded, counted as when Redis fails.
type stickyReads struct {
	ReadYourWrites
	replica    Listings
	fallbacks  *prometheus.CounterVec
	unrecorded prometheus.Counter
	outages    Outages
	log        *zap.Logger
}

func newStickyReads(rw *ReadYourWrites, replica Listings, reg prometheus.Registerer, outages Outages, log *zap.Logger) *stickyReads {
	s := &stickyReads{
		ReadYourWrites: *rw,
		replica:        replica,
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "newsfeed_read_primary_fallback_total",
			Help: "Listings read from the primary instead of the replica: the replica had not replayed the caller's recent write (lagging), or that could not be checked in time (unchecked).",
		}, []string{"reason"}),
		unrecorded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_write_position_failures_total",
			Help: "Writes whose log position could not be recorded in Redis: their author's listings may lag behind them until the replica replays them.",
		}),
		outages: outages,
		log:     log,
	}
	if reg != nil {
		reg.MustRegister(s.fallbacks, s.unrecorded)
	}
	return s
}

// wrote records the primary's position after user's write committed, before
// the response says so. A failure is counted and logged with the request's
// id (at debug while an outage the health watch logged explains it), never
// returned: the write stands on PostgreSQL alone.
func (s *stickyReads) wrote(ctx context.Context, user int64) {
	if redisKnownDown(s.outages) {
		s.unrecorded.Inc()
		return
	}
	lsn, err := s.Replication.WritePosition(ctx)
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, cmp.Or(s.checkWait, positionWait))
		err = s.Positions.Record(rctx, user, lsn)
		cancel()
	}
	if err != nil && ctx.Err() == nil { // else the client left
		s.unrecorded.Inc()
		logAside(ctx, s.outages, logctx.From(ctx, s.log),
			"cannot record the write position; its author may read stale listings until the replica catches up", err)
	}
}

// listings returns where the caller's listing is read: the replica, unless
// it may not have replayed the caller's own write of the last sticky.TTL.
// Any listing may show the caller's writes (their follow in someone's
// followers), so every listing they read is checked.
func (s *stickyReads) listings(ctx context.Context, caller int64) Listings {
	if redisKnownDown(s.outages) {
		s.fallbacks.WithLabelValues(reasonUnchecked).Inc()
		return s.Primary
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.checkWait, positionWait))
	defer cancel()
	lsn, found, err := s.Positions.Get(ctx, caller)
	if err == nil && !found {
		return s.replica
	}
	var replayed bool
	if err == nil {
		replayed, err = s.Replication.Replayed(ctx, lsn)
	}
	switch {
	case err != nil:
		s.fallbacks.WithLabelValues(reasonUnchecked).Inc()
	case !replayed:
		s.fallbacks.WithLabelValues(reasonLagging).Inc()
	default:
		return s.replica
	}
	return s.Primary
}

// reads returns where the request's listing is read.
func (s *Server) reads(c echo.Context) Listings {
	if s.sticky == nil {
		return s.replica
	}
	return s.sticky.listings(c.Request().Context(), userID(c))
}

// wrote notes the caller's committed write, for their next listings.
func (s *Server) wrote(c echo.Context) {
	if s.sticky != nil {
		s.sticky.wrote(c.Request().Context(), userID(c))
	}
}
