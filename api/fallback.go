package api

import (
	"context"
	"math"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
)

// TruthReader reads a home feed from PostgreSQL, the truth the Redis feeds
// cache.
type TruthReader interface {
	// FolloweePosts returns up to limit live posts with id < before by the
	// people followerID follows, newest first.
	FolloweePosts(ctx context.Context, followerID, before int64, limit int) ([]domain.Post, error)
}

// feedFallback serves home feed pages from PostgreSQL while the feeds in
// Redis cannot be read: the same page, since both follow the same posts and
// follows. At most cap(slots) such reads run at once in a process, so that an
// outage of Redis does not turn every feed read into a PostgreSQL query;
// beyond that a read answers 503. The outage is logged when it begins and
// when it ends, not per request.
type feedFallback struct {
	truth TruthReader
	slots chan struct{}
	reads *prometheus.CounterVec
	log   *zap.Logger
	down  atomic.Bool
}

func newFeedFallback(truth TruthReader, concurrency int, reg prometheus.Registerer, log *zap.Logger) *feedFallback {
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "newsfeed_feed_fallback_reads_total",
		Help: "Home feed reads served from PostgreSQL because Redis did not answer (outcome served), or refused beyond feed.fallback_concurrency (outcome refused).",
	}, []string{"outcome"})
	if reg != nil {
		reg.MustRegister(reads)
	}
	return &feedFallback{truth: truth, slots: make(chan struct{}, concurrency), reads: reads, log: log}
}

// read answers a page from PostgreSQL after the feed read failed with cause.
func (f *feedFallback) read(ctx context.Context, userID, before int64, limit int, cause error) (domain.FeedPage, error) {
	if f.down.CompareAndSwap(false, true) {
		f.log.Warn("home feeds cannot be read from Redis; reading PostgreSQL", zap.Error(cause))
	}
	select {
	case f.slots <- struct{}{}:
		defer func() { <-f.slots }()
	default:
		f.reads.WithLabelValues("refused").Inc()
		return domain.FeedPage{}, cause // 503: as many fallback reads as allowed are running
	}
	if before <= 0 {
		before = math.MaxInt64
	}
	posts, err := f.truth.FolloweePosts(ctx, userID, before, limit+1)
	if err != nil {
		return domain.FeedPage{}, err
	}
	f.reads.WithLabelValues("served").Inc()
	return domain.FeedPage{Posts: posts}, nil // postPage cuts the extra one into a cursor
}

// recovered notes a feed read that Redis served.
func (f *feedFallback) recovered() {
	if f.down.Load() && f.down.CompareAndSwap(true, false) {
		f.log.Info("home feeds are read from Redis again")
	}
}
