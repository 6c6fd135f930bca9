package feed

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/defaults"
	"github.com/newsfeed/newsfeed/internal/replicas"
)

// The defaults of Config: a zero field takes its default.
const (
	// DefaultMaxLen is entries kept per feed (feed.max_len).
	DefaultMaxLen = 800
	// DefaultRebuildWait bounds how long a read waits for another reader's
	// rebuild (feed.rebuild_wait).
	DefaultRebuildWait = 5 * time.Second
	// DefaultRebuildLock is how long a rebuild holds its lock.
	DefaultRebuildLock = 30 * time.Second
	// DefaultPostTTL is how long a post stays in the post cache.
	DefaultPostTTL = 24 * time.Hour
	// DefaultActiveTTL is how long a feed stays in Redis without being read
	// (feed.active_days: 30).
	DefaultActiveTTL = 30 * 24 * time.Hour
	// DefaultWaitTimeout bounds the wait for replicas (redis.wait_timeout).
	DefaultWaitTimeout = replicas.DefaultTimeout
	// DefaultPushSlots is pushes of one Feeds that run their scripts at once.
	DefaultPushSlots = 2
)

// The settings newsfeed runs with where the component's own default is
// "off": app's configuration defaults (feed.backfill,
// fanout.celebrity_threshold) are these, while a zero Config field keeps
// meaning none.
const (
	// RecommendedBackfill is the Backfill of feed.backfill's default: a
	// newly followed author's 50 most recent posts.
	RecommendedBackfill = 50
	// RecommendedCelebrityThreshold is the CelebrityThreshold of
	// fanout.celebrity_threshold's default: authors with more than 10000
	// followers are pulled.
	RecommendedCelebrityThreshold = 10000
	// RecommendedFollowingThreshold is the FollowingThreshold of
	// fanout.following_threshold's default: readers who follow more than
	// 2000 accounts are read from PostgreSQL.
	RecommendedFollowingThreshold = 2000
)

// Config configures Feeds. A zero field takes the default named; a negative
// one is out of range, and New refuses it.
type Config struct {
	// Prefix is put before every Redis key. Defaults to "".
	Prefix string
	// Registerer takes the feeds' metrics (what reads filter out); nil
	// keeps them unregistered.
	Registerer prometheus.Registerer
	// MaxLen is entries kept per feed. Defaults to DefaultMaxLen (800).
	MaxLen int
	// Backfill is how many recent posts of a newly followed author are
	// merged into the follower's feed. Defaults to 0: none (the feed then
	// keeps only what is newer than the followee's newest post, and reads
	// find the rest in PostgreSQL). newsfeed runs with RecommendedBackfill.
	Backfill int
	// RebuildWait bounds how long a read waits for another reader's rebuild
	// before it answers from PostgreSQL. Defaults to DefaultRebuildWait (5s).
	RebuildWait time.Duration
	// RebuildLock is how long a rebuild holds its lock; a rebuild slower
	// than that loses it to the next reader's, and gives up. Defaults to
	// DefaultRebuildLock (30s).
	RebuildLock time.Duration
	// PostTTL is how long a post stays in the post cache. Defaults to
	// DefaultPostTTL (24h).
	PostTTL time.Duration
	// ActiveTTL is how long a feed stays in Redis without being read
	// (feed.active_days). Fan-out writes only feeds that exist, so readers
	// who stay away cost neither memory nor fan-out work, and get their feed
	// rebuilt when they return. Defaults to DefaultActiveTTL (30 days).
	ActiveTTL time.Duration
	// CelebrityThreshold: authors with more followers are pulled into feeds
	// at read time instead of fanned out (fanout.celebrity_threshold).
	// Defaults to 0: nobody is. newsfeed runs with
	// RecommendedCelebrityThreshold.
	CelebrityThreshold int64
	// FollowingThreshold: readers who follow more accounts than this keep
	// no feed in Redis, so fan-out writes nothing for them; their home feed
	// is read from PostgreSQL (fanout.following_threshold). Defaults to 0:
	// every reader keeps one. newsfeed runs with
	// RecommendedFollowingThreshold.
	FollowingThreshold int64
	// Cluster tells that Redis is a Redis Cluster, where one script call
	// touches the feeds of one primary only (see planCalls). Defaults to
	// false.
	Cluster bool
	// WaitReplicas is how many replicas of each primary written to must
	// have a fan-out's writes before they count as done (redis.wait_replicas):
	// with 1, a failover cannot lose a post whose delivery was recorded.
	// Defaults to 0: the writes count once the primary has them.
	WaitReplicas int
	// WaitTimeout bounds the wait for those replicas; fewer in time fail
	// the write, which is tried again (redis.wait_timeout). Defaults to
	// DefaultWaitTimeout (1s).
	WaitTimeout time.Duration
	// PushSlots is how many pushes of this Feeds run their scripts at once;
	// the others wait, and go oldest post first (see pushOrder). Defaults
	// to DefaultPushSlots (2): one running in Redis, one on its way.
	PushSlots int
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
}

// validate refuses the values out of range, naming each field. Zero is in
// range: it means the default.
func (c *Config) validate() error {
	return errors.Join(
		notNegative("MaxLen", c.MaxLen, defaults.The(DefaultMaxLen)),
		notNegative("Backfill", c.Backfill, "none"),
		notNegative("RebuildWait", c.RebuildWait, defaults.The(DefaultRebuildWait)),
		notNegative("RebuildLock", c.RebuildLock, defaults.The(DefaultRebuildLock)),
		notNegative("PostTTL", c.PostTTL, defaults.The(DefaultPostTTL)),
		notNegative("ActiveTTL", c.ActiveTTL, defaults.The(DefaultActiveTTL)),
		notNegative("CelebrityThreshold", c.CelebrityThreshold, "nobody pulled"),
		notNegative("FollowingThreshold", c.FollowingThreshold, "every reader pushed to"),
		notNegative("WaitReplicas", c.WaitReplicas, "no wait"),
		notNegative("WaitTimeout", c.WaitTimeout, defaults.The(DefaultWaitTimeout)),
		notNegative("PushSlots", c.PushSlots, defaults.The(DefaultPushSlots)),
	)
}

func notNegative[T defaults.Number](field string, v T, zero string) error {
	return defaults.NotNegative("feed.Config", field, v, zero)
}

// withDefaults returns a valid c with every zero field set to its default.
func (c Config) withDefaults() Config {
	defaults.Fill(&c.MaxLen, DefaultMaxLen)
	defaults.Fill(&c.RebuildWait, DefaultRebuildWait)
	defaults.Fill(&c.RebuildLock, DefaultRebuildLock)
	defaults.Fill(&c.PostTTL, DefaultPostTTL)
	defaults.Fill(&c.ActiveTTL, DefaultActiveTTL)
	defaults.Fill(&c.WaitTimeout, DefaultWaitTimeout)
	defaults.Fill(&c.PushSlots, DefaultPushSlots)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}
