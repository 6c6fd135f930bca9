package feed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/failpoint"
)

// rebuildFeed fills a feed that Redis does not hold complete (lost, expired,
// never read, or without its following hash) from PostgreSQL: the newest
// max_len posts of the people the user follows, and whom they follow.
func (f *Feeds) rebuildFeed(ctx context.Context, userID int64) error {
	return f.rebuildSet(ctx, f.feedTarget(userID))
}

// feedTarget is userID's feed as a set to rebuild.
func (f *Feeds) feedTarget(userID int64) rebuildTarget {
	return rebuildTarget{
		set:         f.keys.feedSet(userID),
		following:   f.keys.following(userID),
		followsMany: f.keys.followsMany(userID),
		lock:        f.keys.rebuildLock(userID),
		load: func(ctx context.Context) (rebuilt, error) {
			followees, hidden, version, err := f.store.FeedGraph(ctx, userID)
			if err != nil {
				return rebuilt{}, err
			}
			if f.overFollowingThreshold(int64(len(followees))) {
				return rebuilt{followsMany: true}, nil
			}
			// The reader's own posts are in their feed: they follow
			// themself, as far as the feed's scripts can tell.
			followees = append(followees, userID)
			posts, err := f.store.FeedEntries(ctx, userID, f.cfg.MaxLen)
			ids := make([]int64, len(posts))
			for i, p := range posts {
				ids[i] = p.ID
			}
			return rebuilt{ids: ids, posts: posts, followees: followees, hidden: hidden, graphVersion: version}, err
		},
	}
}

// rebuildTries bounds how often Rebuild starts a rebuild that another one,
// begun before its drop, may have held up.
const rebuildTries = 3

// Rebuild drops userID's feed and rebuilds it from PostgreSQL now, by the
// rebuild that a read of a missing feed runs, and returns the feed as Redis
// then holds it: the operator's repair (`newsfeed feed rebuild`) of a feed
// found wrong, without waiting for its reader. Reads and fan-out meanwhile
// are safe as with any rebuild: posts pushed while it reads PostgreSQL are
// kept, and a rebuild by a reader that began before the drop gives up and
// is waited for, then this one runs. A reader who follows more accounts
// than FollowingThreshold keeps no feed: Stored.FollowsMany says so.
func (f *Feeds) Rebuild(ctx context.Context, userID int64) (Stored, error) {
	if err := f.Drop(ctx, userID); err != nil {
		return Stored{}, err
	}
	for range rebuildTries {
		if err := f.rebuildFeed(ctx, userID); errors.Is(err, errFollowsMany) {
			return Stored{FollowsMany: true}, nil
		} else if err != nil {
			return Stored{}, err
		}
		done, err := f.complete(ctx, f.feedTarget(userID))
		if err != nil {
			return Stored{}, err
		}
		if done {
			return Inspect(ctx, f.rdb, f.cfg.Prefix, userID)
		}
	}
	return Stored{}, fmt.Errorf("rebuild feed %d: other rebuilds of it kept it busy; its next read rebuilds it", userID)
}

// rebuildTimeline fills a missing timeline with the author's newest max_len
// posts, as a feed rebuild does.
func (f *Feeds) rebuildTimeline(ctx context.Context, authorID int64) error {
	return f.rebuildSet(ctx, rebuildTarget{
		set:  f.keys.timelineSet(authorID),
		lock: f.keys.timelineLock(authorID),
		load: func(ctx context.Context) (rebuilt, error) {
			ids, err := f.store.AuthorPostIDsSince(ctx, authorID, 0, f.cfg.MaxLen)
			return rebuilt{ids: ids}, err
		},
	})
}

// rebuildTarget is a set to rebuild (its head and tail keys): a feed (with
// its following hash) or a timeline.
type rebuildTarget struct {
	set setKeys
	// following and followsMany are a feed's following hash and the mark
	// of a reader who follows many (markFollowsMany); a timeline has
	// neither.
	following, followsMany, lock string
	load                         func(context.Context) (rebuilt, error)
}

// rebuilt is what a rebuild read from PostgreSQL.
type rebuilt struct {
	ids       []int64
	posts     []domain.Post // to cache, when the load read them whole
	followees []int64
	hidden    []int64 // users whose entries the reader's feed hides
	// graphVersion is the version of the reader's graph followees were
	// read at.
	graphVersion int64
	// followsMany: the reader follows more accounts than
	// FollowingThreshold, and keeps no feed in Redis (markFollowsMany).
	followsMany bool
}

// rebuildSet fills a set that is not complete with what t.load returns. One
// reader rebuilds, under a lock; the others wait for it, up to RebuildWait.
// Posts pushed while the rebuild reads PostgreSQL are kept: its token in an
// empty set makes the set exist, so pushes land in it. A follow or an
// unfollow while it reads drops the set with the token, and a later rebuild
// (this one's lock ran out) replaces it: the rebuild then gives up, and the
// next read rebuilds with the news.
func (f *Feeds) rebuildSet(ctx context.Context, t rebuildTarget) error {
	token := randomToken()
	ok, err := f.rdb.SetNX(ctx, t.lock, token, f.cfg.RebuildLock).Result()
	if err != nil {
		return fmt.Errorf("rebuild %s: lock: %w", t.set.meta, err)
	}
	if !ok {
		return f.awaitRebuild(ctx, t)
	}
	defer func() {
		// Release on a fresh context: a cancelled read must not keep the lock.
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = unlockScript.Run(unlockCtx, f.rdb, []string{t.lock}, token).Err() // expires anyway
	}()
	// Another reader may have rebuilt it between our read and our lock.
	if done, err := f.complete(ctx, t); err != nil || done {
		return err
	}

	building := header{flags: flagBuilding, token: buildToken()}
	if _, err := f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		// Start afresh: an incomplete set may hold anything, and a slower
		// rebuild's token must go so that it gives up. The set expires
		// soon, should this rebuild never finish.
		ttl := time.Duration(f.buildTTLSeconds()) * time.Second
		p.Del(ctx, t.set.list()...)
		p.Set(ctx, t.set.meta, building.meta(), ttl)
		p.Set(ctx, t.set.head, building.head(), ttl)
		return nil
	}); err != nil {
		return fmt.Errorf("rebuild %s: %w", t.set.meta, err)
	}
	if err := f.fillRebuild(ctx, t, building.token); err != nil {
		if !errors.Is(err, errFollowsMany) {
			f.abandonRebuild(ctx, t, building.token)
		}
		return fmt.Errorf("rebuild %s: %w", t.set.meta, err)
	}
	return nil
}

// fillRebuild reads the set's content from PostgreSQL and completes the
// set begun with token.
func (f *Feeds) fillRebuild(ctx context.Context, t rebuildTarget, token [8]byte) error {
	data, err := t.load(ctx)
	if err != nil {
		return err
	}
	if data.followsMany {
		failpoint.Hit(ctx, failpoint.BeforeFinishRebuild)
		return f.markFollowsMany(ctx, t, token)
	}
	// Read after the load: a fan-out whose followers were read after this
	// position sees every unfollow the load saw (see pushScript).
	asOf, err := f.store.WritePosition(ctx)
	if err != nil {
		return err
	}
	failpoint.Hit(ctx, failpoint.BeforeFinishRebuild)
	whole := 0
	if len(data.ids) < f.cfg.MaxLen { // fewer than asked for: that is all there is
		whole = 1
	}
	args := make([]any, 0, 9+len(data.followees))
	args = append(args, f.cfg.MaxLen, f.ttlSeconds(), whole, token[:], len(data.followees), randomVersion(), asOf, data.graphVersion)
	args = append(args, int64sToArgs(data.followees)...)
	args = append(args, joinIDs(data.hidden), packIDs(data.ids))
	if err := finishRebuildScript.Run(ctx, f.rdb, t.keys(), args...).Err(); err != nil {
		return err
	}
	f.cachePosts(ctx, data.posts, nil, nil)
	return nil
}

// errFollowsMany says that a reader's feed is not kept in Redis: they follow
// more accounts than FollowingThreshold, and their pages come from
// PostgreSQL.
var errFollowsMany = fmt.Errorf("%w: the reader follows more accounts than fanout.following_threshold", errFromPostgres)

// followsManyTTL is how long a reader found to follow many is read from
// PostgreSQL without a rebuild counting again: an unfollow that takes them
// under the threshold clears the mark (ApplyFollow), and a lapse costs a
// rebuild's lock, empty set and graph read.
const followsManyTTL = time.Minute

// overFollowingThreshold tells whether a reader who follows n accounts is
// read from PostgreSQL rather than fanned out to.
func (f *Feeds) overFollowingThreshold(n int64) bool {
	return f.cfg.FollowingThreshold > 0 && n > f.cfg.FollowingThreshold
}

// markFollowsMany ends the rebuild begun with token of a reader who
// follows many: the set goes, and the mark that sends their reads to
// PostgreSQL is set (followsManyScript), unless a change of their graph or
// another rebuild came between. It returns errFollowsMany when it set the
// mark; else nil, as a rebuild overtaken does (the set is not complete:
// the read comes from PostgreSQL, and the next one decides again).
func (f *Feeds) markFollowsMany(ctx context.Context, t rebuildTarget, token [8]byte) error {
	keys := append(t.keys(), t.followsMany)
	set, err := followsManyScript.Run(ctx, f.rdb, keys, token[:], int64(followsManyTTL/time.Second)).Int()
	if err != nil {
		return err
	}
	if set == 1 {
		return errFollowsMany
	}
	return nil
}

// followsManyMarked tells whether userID is marked as a reader who follows
// many, read from PostgreSQL (markFollowsMany).
func (f *Feeds) followsManyMarked(ctx context.Context, userID int64) (bool, error) {
	n, err := f.rdb.Exists(ctx, f.keys.followsMany(userID)).Result()
	if err != nil {
		return false, fmt.Errorf("read feed %d: %w", userID, err)
	}
	return n > 0, nil
}

// abandonRebuild removes the set a failed rebuild began, unless another
// rebuild took it over (abandonRebuildScript), on a context of its own: the
// caller's may be what ended the rebuild. If that fails too, the set
// expires soon (buildTTLSeconds).
func (f *Feeds) abandonRebuild(ctx context.Context, t rebuildTarget, token [8]byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = abandonRebuildScript.Run(ctx, f.rdb, t.keys(), token[:]).Err()
}

// keys are the set's keys, and for a feed its reader's following hash, as
// the rebuild scripts take them.
func (t rebuildTarget) keys() []string {
	keys := t.set.list()
	if t.following != "" {
		keys = append(keys, t.following)
	}
	return keys
}

// complete tells whether the set is complete, by the rule readSets follows:
// a feed needs its following hash too.
func (f *Feeds) complete(ctx context.Context, t rebuildTarget) (bool, error) {
	var read setRead
	var version *redis.SliceCmd
	cmds, err := pipelinedReads(ctx, f.rdb, func(p redis.Pipeliner) error {
		read = readSet(ctx, p, t.set, math.MaxInt64, 1, 0)
		if t.following != "" {
			version = p.HMGet(ctx, t.following, versionField, mergesField, hidesField)
		}
		return nil
	})
	if err = failure(firstError(cmds, err)); err != nil {
		return false, fmt.Errorf("rebuild %s: %w", t.set.meta, err)
	}
	set, err := read.decode()
	if err != nil {
		return false, fmt.Errorf("rebuild %s: %w", t.set.meta, err)
	}
	return set.complete && (version == nil || hashComplete(version.Val())), nil
}

// awaitRebuild waits until another reader's rebuild completed the set, gave
// up (its lock is gone), or RebuildWait passed; the caller reads again and
// answers from PostgreSQL if the set is still not complete.
func (f *Feeds) awaitRebuild(ctx context.Context, t rebuildTarget) error {
	deadline := time.Now().Add(f.cfg.RebuildWait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		done, err := f.complete(ctx, t)
		if err != nil || done {
			return err
		}
		if held, err := f.rdb.Exists(ctx, t.lock).Result(); err != nil || held == 0 {
			return err
		}
	}
	return nil
}

// randomVersion starts a following hash's version at a random point, so
// that a hash rebuilt never repeats a version an older one had (cached
// celebrity lists are tagged with it).
func randomVersion() int64 {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	var v int64
	for _, c := range b {
		v = v<<8 | int64(c)
	}
	return v
}

// buildToken is a rebuild's token in a head: random, never all zeros.
func buildToken() [8]byte {
	var t [8]byte
	for t == ([8]byte{}) {
		_, _ = rand.Read(t[:])
	}
	return t
}

func randomToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
