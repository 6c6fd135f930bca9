package feed

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/logctx"
)

// Celebrities — authors with more followers than the threshold — are not
// fanned out: each has a timeline in Redis (a set of their post ids, laid
// out like a feed, with the same flags), and a home feed read merges the
// timelines of the celebrities its reader follows with the reader's feed.
//
// Which of a reader's followees are celebrities is the intersection of
// their following hash with the set of pulled authors (every author whose
// posts were ever pulled instead of pushed: once pulled, always merged, as
// the posts of those days are in nobody's feed). A reader's intersection is
// cached, tagged with the version of their following hash and the size of
// the pulled set, both of which only change when the answer may: a follow,
// an unfollow, a new celebrity. A cached list whose tag is not current is
// never used, so no list is ever stale, and none is ever written with a
// current tag from older data.

// IsCelebrity reports whether an author with this many followers is pulled
// at read time instead of fanned out.
func (f *Feeds) IsCelebrity(followers int64) bool {
	return f.cfg.CelebrityThreshold > 0 && followers > f.cfg.CelebrityThreshold
}

// AddToTimeline adds a celebrity's post to their timeline, if the timeline
// exists (a read rebuilds a missing one from PostgreSQL). It first adds the
// author to the pulled authors, so that every read from then on merges the
// timeline.
func (f *Feeds) AddToTimeline(ctx context.Context, e domain.Entry) error {
	authorID, postID := e.AuthorID, e.PostID
	since := f.replicas.Begin(ctx, f.keys.pulled(), f.keys.timeline(authorID))
	err := f.rdb.SAdd(ctx, f.keys.pulled(), authorID).Err()
	if err == nil {
		_, err = f.runOverKeys(ctx, pushScript, f.keys.timelineSet(authorID).list(), 3, true, postID, f.cfg.MaxLen, spillAt(f.cfg.MaxLen), "", 0, 0, flag(false))
	}
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return fmt.Errorf("add post %d to timeline %d: %w", postID, authorID, err)
	}
	return nil
}

// RemoveFromTimeline takes a deleted post out of its author's timeline.
func (f *Feeds) RemoveFromTimeline(ctx context.Context, e domain.Entry) error {
	authorID, postID := e.AuthorID, e.PostID
	since := f.replicas.Begin(ctx, f.keys.timeline(authorID))
	_, err := f.runOverKeys(ctx, removeScript, f.keys.timelineSet(authorID).list(), 3, true, postID)
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return fmt.Errorf("remove post %d from timeline %d: %w", postID, authorID, err)
	}
	return nil
}

// celebrities returns the pulled authors userID follows: from the cached
// list when its tag is current (meta, read with the page), else computed
// from the following hash and the pulled set, and cached.
func (f *Feeds) celebrities(ctx context.Context, userID int64, meta readMeta) ([]int64, error) {
	if f.cfg.CelebrityThreshold <= 0 {
		return nil, nil
	}
	if !meta.pulledComplete {
		n, err := f.rebuildPulled(ctx)
		if err != nil {
			return nil, err
		}
		meta.pulledCount = n
	}
	tag := meta.followingVersion + "/" + strconv.FormatInt(meta.pulledCount, 10) + "|"
	if list, ok := strings.CutPrefix(meta.celebCache, tag); ok {
		return parseIDs(list), nil
	}
	fields, err := f.rdb.HGetAll(ctx, f.keys.following(userID)).Result()
	if err != nil {
		return nil, fmt.Errorf("celebrities followed by %d: %w", userID, err)
	}
	if _, ok := fields[versionField]; !ok {
		return nil, errFromPostgres // the hash went since the page began (a follow, an unfollow)
	}
	var followees []any
	for m, v := range fields {
		if followed(m, v) {
			followees = append(followees, m)
		}
	}
	var ids []int64
	if len(followees) > 0 {
		pulled, err := f.rdb.SMIsMember(ctx, f.keys.pulled(), followees...).Result()
		if err != nil {
			return nil, fmt.Errorf("celebrities followed by %d: %w", userID, err)
		}
		for i, ok := range pulled {
			if id, err := strconv.ParseInt(followees[i].(string), 10, 64); ok && err == nil {
				ids = append(ids, id)
			}
		}
	}
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatInt(id, 10)
	}
	// A failed write only costs this computation again on the next read.
	if err := f.rdb.Set(ctx, f.keys.celebrities(userID), tag+strings.Join(list, ","), f.cfg.ActiveTTL).Err(); err != nil && ctx.Err() == nil {
		logctx.From(ctx, f.log).Warn("celebrity list cache write failed", zap.Error(err))
	}
	return ids, nil
}

// rebuildPulled fills the set of pulled authors from PostgreSQL and marks it
// complete; authors added meanwhile by fan-out stay. It returns its size.
func (f *Feeds) rebuildPulled(ctx context.Context) (int64, error) {
	ids, err := f.store.PulledAuthors(ctx)
	if err != nil {
		return 0, fmt.Errorf("pulled authors: %w", err)
	}
	members := append([]any{completeMarker}, int64sToArgs(ids)...)
	var size *redis.IntCmd
	_, err = f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for start := 0; start < len(members); start += maxPipeline {
			p.SAdd(ctx, f.keys.pulled(), members[start:min(start+maxPipeline, len(members))]...)
		}
		size = p.SCard(ctx, f.keys.pulled())
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pulled authors: %w", err)
	}
	return size.Val(), nil
}

func parseIDs(list string) []int64 {
	var ids []int64
	for _, s := range strings.Split(list, ",") {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}
