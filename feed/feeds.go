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
	// FolloweePosts returns up to limit live posts with id < before by the
	// people followerID follows, newest first.
	FolloweePosts(ctx context.Context, followerID, before int64, limit int) ([]domain.Post, error)
	// AuthorPostIDsSince returns the author's live post ids >= since, newest
	// first, at most limit.
	AuthorPostIDsSince(ctx context.Context, authorID, since int64, limit int) ([]int64, error)
	// AuthorPostIDsBetween returns the author's live post ids in
	// [since, before), newest first, at most limit.
	AuthorPostIDsBetween(ctx context.Context, authorID, since, before int64, limit int) ([]int64, error)
	// Followees returns everyone followerID follows.
	Followees(ctx context.Context, followerID int64) ([]int64, error)
	// PulledAuthors returns the authors whose posts were ever pulled into
	// feeds at read time instead of pushed.
	PulledAuthors(ctx context.Context) ([]int64, error)
	// WritePosition returns how far the primary's write-ahead log goes:
	// every transaction committed before the call ends at or below it.
	WritePosition(ctx context.Context) (int64, error)
}

// Config configures Feeds. Zero fields take the defaults named.
type Config struct {
	// Prefix is put before every Redis key. Defaults to "".
	Prefix string
	// MaxLen is entries kept per feed. Defaults to 800.
	MaxLen int
	// Backfill is how many recent posts of a newly followed author are
	// merged into the follower's feed. Defaults to 0: none (the feed then
	// keeps only what is newer than the followee's newest post, and reads
	// find the rest in PostgreSQL).
	Backfill int
	// RebuildWait bounds how long a read waits for another reader's rebuild
	// before it answers from PostgreSQL. Defaults to 5s.
	RebuildWait time.Duration
	// RebuildLock is how long a rebuild holds its lock; a rebuild slower
	// than that loses it to the next reader's, and gives up. Defaults to 30s.
	RebuildLock time.Duration
	// PostTTL is how long a post stays in the post cache. Defaults to 24h.
	PostTTL time.Duration
	// ActiveTTL is how long a feed stays in Redis without being read
	// (feed.active_days). Fan-out writes only feeds that exist, so readers
	// who stay away cost neither memory nor fan-out work, and get their feed
	// rebuilt when they return. Defaults to 30 days.
	ActiveTTL time.Duration
	// CelebrityThreshold: authors with more followers are pulled into feeds
	// at read time instead of fanned out (fanout.celebrity_threshold).
	// Defaults to 0: nobody is.
	CelebrityThreshold int64
	// Cluster tells that Redis is a Redis Cluster, where one script call
	// cannot touch the feeds of many users. Defaults to false.
	Cluster bool
	// WaitReplicas is how many replicas of each primary written to must
	// have a fan-out's writes before they count as done (redis.wait_replicas):
	// with 1, a failover cannot lose a post whose delivery was recorded.
	// Defaults to 0: the writes count once the primary has them.
	WaitReplicas int
	// WaitTimeout bounds the wait for those replicas; fewer in time fail
	// the write, which is tried again (redis.wait_timeout). Defaults to 1s.
	WaitTimeout time.Duration
	// PushSlots is how many pushes of this Feeds run their scripts at once;
	// the others wait, and go oldest post first (see pushOrder). Defaults
	// to 2: one running in Redis, one on its way.
	PushSlots int
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
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
}

// New builds Feeds on a Redis client and the PostgreSQL store.
func New(rdb redis.UniversalClient, store Store, cfg Config) *Feeds {
	if cfg.MaxLen <= 0 {
		cfg.MaxLen = 800
	}
	if cfg.RebuildWait <= 0 {
		cfg.RebuildWait = 5 * time.Second
	}
	if cfg.RebuildLock <= 0 {
		cfg.RebuildLock = 30 * time.Second
	}
	if cfg.PostTTL <= 0 {
		cfg.PostTTL = 24 * time.Hour
	}
	if cfg.ActiveTTL <= 0 {
		cfg.ActiveTTL = 30 * 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = time.Second
	}
	if cfg.PushSlots <= 0 {
		cfg.PushSlots = 2
	}
	return &Feeds{rdb: rdb, store: store, cfg: cfg, keys: keys{cfg.Prefix}, log: cfg.Logger,
		replicas: replicas.New(rdb, cfg.Prefix, cfg.WaitReplicas, cfg.WaitTimeout), order: newPushOrder(cfg.PushSlots)}
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
