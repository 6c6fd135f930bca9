package api

import (
	"context"
	"errors"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/health"
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
// beyond that a read answers 503. It logs nothing of the outage itself: the
// health watch (Config.Outages) logs it once when it begins and once when it
// ends.
type feedFallback struct {
	truth TruthReader
	slots chan struct{}
	reads *prometheus.CounterVec
}

// errRedisKnownDown is why a feed read that did not try Redis could not be
// served by it: the health watch knows it is down. A 503 for it is
// explained by the outage.
var errRedisKnownDown = &health.DownError{Name: health.Redis, Err: errors.New("known to be down; not tried")}

func newFeedFallback(truth TruthReader, concurrency int, reg prometheus.Registerer) *feedFallback {
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "newsfeed_feed_fallback_reads_total",
		Help: "Home feed reads served from PostgreSQL because Redis did not answer (outcome served), or refused beyond feed.fallback_concurrency (outcome refused).",
	}, []string{"outcome"})
	if reg != nil {
		reg.MustRegister(reads)
	}
	return &feedFallback{truth: truth, slots: make(chan struct{}, concurrency), reads: reads}
}

// read answers a page from PostgreSQL because Redis could not, for cause.
func (f *feedFallback) read(ctx context.Context, userID, before int64, limit int, cause error) (domain.FeedPage, error) {
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
