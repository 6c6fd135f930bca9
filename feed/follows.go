package feed

import (
	"context"
	"fmt"
	"math"

	"github.com/redis/go-redis/v9"
)

// Followed records in Redis that follower follows followee now and merges up
// to Backfill recent posts of followee into follower's feed (if it exists),
// keeping the feed a complete prefix: when the followee may have older posts
// than those merged, the feed keeps only what is at or above the oldest one
// merged (with no backfill: what is newer than the followee's newest post),
// and reads find the rest in PostgreSQL. It returns how many posts were new.
func (f *Feeds) Followed(ctx context.Context, follower, followee int64) (int, error) {
	ids, err := f.store.AuthorPostIDsSince(ctx, followee, 0, max(f.cfg.Backfill, 1))
	if err != nil {
		return 0, fmt.Errorf("backfill feed %d: %w", follower, err)
	}
	var floor int64
	switch {
	case f.cfg.Backfill <= 0:
		if len(ids) > 0 {
			floor = ids[0] + 1 // above every post of the followee
		}
		ids = nil
	case len(ids) == f.cfg.Backfill: // the followee may have older posts
		floor = ids[len(ids)-1]
	}
	args := append([]any{f.cfg.MaxLen, floor, followee}, int64sToArgs(ids)...)
	n, err := followScript.Run(ctx, f.rdb, []string{f.keys.feed(follower), f.keys.following(follower)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("backfill feed %d: %w", follower, err)
	}
	return max(n, 0), nil
}

// Unfollowed records in Redis that follower no longer follows followee and
// removes followee's posts from follower's feed without scanning it: every
// post of the followee that the feed holds is at or above the feed's lowest
// entry, so those ids are read from PostgreSQL, a page at a time, and
// removed. Pushes of the followee's posts are refused from then on (the
// following hash no longer lists them), so nothing comes back.
func (f *Feeds) Unfollowed(ctx context.Context, follower, followee int64) error {
	feedKey := f.keys.feed(follower)
	lowest, err := f.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key: feedKey, Start: 1, Stop: "+inf", ByScore: true, Count: 1,
	}).Result()
	if err != nil {
		return fmt.Errorf("unfill feed %d: %w", follower, err)
	}
	var ids []int64
	if len(lowest) > 0 {
		since, before := int64(lowest[0].Score), int64(math.MaxInt64)
		for {
			page, err := f.store.AuthorPostIDsBetween(ctx, followee, since, before, unfollowPage)
			if err != nil {
				return fmt.Errorf("unfill feed %d: %w", follower, err)
			}
			ids = append(ids, page...)
			if len(page) < unfollowPage {
				break
			}
			before = page[len(page)-1]
		}
	}
	args := append([]any{followee}, int64sToArgs(ids)...)
	if err := unfollowScript.Run(ctx, f.rdb, []string{feedKey, f.keys.following(follower)}, args...).Err(); err != nil {
		return fmt.Errorf("unfill feed %d: %w", follower, err)
	}
	return nil
}

// unfollowPage is how many post ids an unfollow reads from PostgreSQL at once.
const unfollowPage = 1000
