package feed

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/replicas"
)

// Store is the PostgreSQL side that feeds cache.
type Store interface {
	// PostsByID returns the live posts among ids, in any order.
	PostsByID(ctx context.Context, ids []int64) ([]domain.Post, error)
	// FolloweePosts returns up to limit entries with id < before of
	// followerID's home feed, newest first, as the contract defines it.
	FolloweePosts(ctx context.Context, followerID, before int64, limit int) ([]domain.Post, error)
	// FeedEntries returns the newest limit posts and reposts of userID and
	// of the people they follow, unfiltered: what a Redis feed holds.
	FeedEntries(ctx context.Context, userID int64, limit int) ([]domain.Post, error)
	// FeedGraph returns whom userID follows and hides, and the version of
	// their graph it was read at.
	FeedGraph(ctx context.Context, userID int64) (followees, hidden []int64, version int64, err error)
	// Repeats returns, of reposts, those userID's feed holds but does not
	// show (an earlier entry of the same original shows, by the users the
	// feed hides: hides), and of page, the posts deleted by now.
	Repeats(ctx context.Context, userID int64, hides, reposts, page []int64) (repeats, deleted map[int64]bool, err error)
	// AuthorPostIDsSince returns the author's live post ids >= since, newest
	// first, at most limit.
	AuthorPostIDsSince(ctx context.Context, authorID, since int64, limit int) ([]int64, error)
	// AuthorPostIDsBetween returns the author's live post ids in
	// [since, before), newest first, at most limit.
	AuthorPostIDsBetween(ctx context.Context, authorID, since, before int64, limit int) ([]int64, error)
	// Followees returns everyone followerID follows, and the version of
	// their graph it was read at.
	Followees(ctx context.Context, followerID int64) (followees []int64, version int64, err error)
	// PulledAuthors returns the authors whose posts were ever pulled into
	// feeds at read time instead of pushed.
	PulledAuthors(ctx context.Context) ([]int64, error)
	// WritePosition returns how far the primary's write-ahead log goes:
	// every transaction committed before the call ends at or below it.
	WritePosition(ctx context.Context) (int64, error)
}

// Feeds reads and writes home feeds.
type Feeds struct {
	rdb      redis.UniversalClient
	store    Store
	cfg      Config
	keys     keys
	log      *zap.Logger
	replicas *replicas.Waiter // nil: no wait
	order    *pushOrder
	metrics  *metrics
}

// New builds Feeds on a Redis client and the PostgreSQL store. It returns
// an error, naming the field, when cfg holds a value out of range.
func New(rdb redis.UniversalClient, store Store, cfg Config) (*Feeds, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Feeds{rdb: rdb, store: store, cfg: cfg, keys: keys{cfg.Prefix}, log: cfg.Logger,
		replicas: replicas.New(rdb, cfg.Prefix, cfg.WaitReplicas, cfg.WaitTimeout), order: newPushOrder(cfg.PushSlots),
		metrics: newMetrics(cfg.Registerer)}, nil
}

// maxPipeline bounds the commands sent in one pipeline; very large pipelines
// fail or stall Redis (Misskey saw it at ~30k).
const maxPipeline = 2000

// maxScriptKeys bounds the sets one script call writes, so that no call
// holds Redis for long (about a millisecond per thousand).
const maxScriptKeys = 1000

// ttlSeconds is feed.active_days in seconds, for scripts.
func (f *Feeds) ttlSeconds() int64 { return int64(f.cfg.ActiveTTL / time.Second) }

// buildTTLSeconds is how long a set under rebuild lives: twice the rebuild
// lock, so that one whose rebuild died (and which pushes still fill) goes
// soon if nobody reads it again. The finish gives the set feed.active_days.
func (f *Feeds) buildTTLSeconds() int64 { return int64(2 * f.cfg.RebuildLock / time.Second) }
