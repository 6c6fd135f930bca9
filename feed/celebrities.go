package feed

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Celebrities — authors with more followers than the threshold — are not
// fanned out: each has a timeline in Redis (a sorted set of their post ids,
// like a feed, with the same markers), and a home feed read merges the
// timelines of the celebrities its reader follows with the reader's feed.
// Which followees of a reader are celebrities is cached per reader for a
// minute and dropped on every follow and unfollow of theirs.

const celebrityCacheTTL = time.Minute

// noCelebrities is the cached list of a reader who follows none.
const noCelebrities = "0"

// IsCelebrity reports whether an author with this many followers is pulled
// at read time instead of fanned out.
func (f *Feeds) IsCelebrity(followers int64) bool {
	return f.cfg.CelebrityThreshold > 0 && followers > f.cfg.CelebrityThreshold
}

// AddToTimeline adds a celebrity's post to their timeline, if the timeline
// exists (a read rebuilds a missing one from PostgreSQL).
func (f *Feeds) AddToTimeline(ctx context.Context, authorID, postID int64) error {
	err := pushScript.Run(ctx, f.rdb, []string{f.keys.timeline(authorID)}, postID, f.cfg.MaxLen).Err()
	if err != nil {
		return fmt.Errorf("add post %d to timeline %d: %w", postID, authorID, err)
	}
	return nil
}

// RemoveFromTimeline takes a deleted post out of its author's timeline.
func (f *Feeds) RemoveFromTimeline(ctx context.Context, authorID, postID int64) error {
	if err := f.rdb.ZRem(ctx, f.keys.timeline(authorID), strconv.FormatInt(postID, 10)).Err(); err != nil {
		return fmt.Errorf("remove post %d from timeline %d: %w", postID, authorID, err)
	}
	return nil
}

// celebrities returns the celebrities userID follows, from the cached list
// read with the page (cached) or else from PostgreSQL, caching it.
func (f *Feeds) celebrities(ctx context.Context, userID int64, cached *redis.StringSliceCmd) ([]int64, error) {
	if f.cfg.CelebrityThreshold <= 0 {
		return nil, nil
	}
	if cached != nil && len(cached.Val()) > 0 {
		var ids []int64
		for _, m := range cached.Val() {
			if id, err := strconv.ParseInt(m, 10, 64); err == nil && m != noCelebrities {
				ids = append(ids, id)
			}
		}
		return ids, nil
	}
	ids, err := f.store.CelebrityFollowees(ctx, userID, f.cfg.CelebrityThreshold)
	if err != nil {
		return nil, fmt.Errorf("celebrities followed by %d: %w", userID, err)
	}
	members := []any{noCelebrities}
	for _, id := range ids {
		members = append(members, id)
	}
	key := f.keys.celebrities(userID)
	if _, err := f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		p.SAdd(ctx, key, members...)
		p.Expire(ctx, key, celebrityCacheTTL)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("cache celebrities followed by %d: %w", userID, err)
	}
	return ids, nil
}

// forgetCelebrities drops a reader's cached celebrity list.
func (f *Feeds) forgetCelebrities(ctx context.Context, userID int64) error {
	if err := f.rdb.Del(ctx, f.keys.celebrities(userID)).Err(); err != nil {
		return fmt.Errorf("forget celebrities of %d: %w", userID, err)
	}
	return nil
}

// rebuildTimeline fills a missing timeline with the author's newest max_len
// posts, once under concurrent reads, keeping posts added meanwhile — as a
// feed rebuild does.
func (f *Feeds) rebuildTimeline(ctx context.Context, authorID int64) error {
	return f.rebuildSet(ctx, f.keys.timeline(authorID), f.keys.timelineLock(authorID), func(ctx context.Context) ([]int64, []Post, error) {
		ids, err := f.store.AuthorPostIDsSince(ctx, authorID, 0, f.cfg.MaxLen)
		return ids, nil, err
	})
}
