package feed

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Followed records in Redis that follower follows followee now and merges up
// to Backfill recent posts of followee into follower's feed (if it exists),
// keeping the feed a complete prefix: when the followee may have older posts
// than those merged, the feed keeps only what is at or above the oldest one
// merged (with no backfill: what is newer than the followee's newest post),
// and reads find the rest in PostgreSQL. The follow is recorded before the
// posts are read, so that a post of the followee committed after the read
// is pushed, not refused. It returns how many posts were new.
func (f *Feeds) Followed(ctx context.Context, follower, followee int64) (int, error) {
	since := f.replicas.Begin(ctx, f.keys.feed(follower), f.keys.following(follower))
	n, err := f.followed(ctx, follower, followee)
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return n, fmt.Errorf("backfill feed %d: %w", follower, err)
	}
	return n, nil
}

func (f *Feeds) followed(ctx context.Context, follower, followee int64) (int, error) {
	keys := append(f.keys.feedSet(follower).list(), f.keys.following(follower))
	there, err := followScript.Run(ctx, f.rdb, keys, followee, f.ttlSeconds()).Int()
	if err != nil {
		return 0, err
	}
	if there == 0 {
		return 0, nil // no feed (any more): the next read rebuilds it with the follow
	}
	ids, err := f.store.AuthorPostIDsSince(ctx, followee, 0, max(f.cfg.Backfill, 1))
	if err != nil {
		return 0, err
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
	return mergeScript.Run(ctx, f.rdb, keys, args...).Int()
}

// Unfollowed records in Redis that follower no longer follows followee and
// removes followee's posts from follower's feed without scanning it: every
// post of the followee that the feed holds is at or above the feed's lowest
// entry (at any id, if the feed is whole), so those ids are read from
// PostgreSQL, a page at a time, and removed. Pushes of the followee's posts
// are refused from then on (the following hash no longer lists them), so
// nothing comes back. Should the feed change under the read so that the
// ids may not cover it, it looks again; a feed that keeps changing is
// dropped, to be rebuilt by the next read.
func (f *Feeds) Unfollowed(ctx context.Context, follower, followee int64) error {
	since := f.replicas.Begin(ctx, f.keys.feed(follower), f.keys.following(follower))
	err := f.unfollowed(ctx, follower, followee)
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return fmt.Errorf("unfill feed %d: %w", follower, err)
	}
	return nil
}

func (f *Feeds) unfollowed(ctx context.Context, follower, followee int64) error {
	keys := append(f.keys.feedSet(follower).list(), f.keys.following(follower))
	// Read now, after the unfollow was committed (its event is being
	// handled): a page of followers read after this position no longer
	// holds the follower, and one read before it makes the push script ask
	// the following hash.
	asOf, err := f.store.WritePosition(ctx)
	if err != nil {
		return err
	}
	for range 3 {
		seen, since, err := f.lowestEntry(ctx, f.keys.feedSet(follower))
		if err != nil {
			return err
		}
		var ids []int64
		if seen != "-" {
			for before := int64(math.MaxInt64); ; {
				page, err := f.store.AuthorPostIDsBetween(ctx, followee, since, before, unfollowPage)
				if err != nil {
					return err
				}
				ids = append(ids, page...)
				if len(page) < unfollowPage {
					break
				}
				before = page[len(page)-1]
			}
		}
		args := append([]any{followee, f.ttlSeconds(), seen, asOf}, int64sToArgs(ids)...)
		n, err := unfollowScript.Run(ctx, f.rdb, keys, args...).Int()
		if err != nil {
			return err
		}
		if n >= 0 {
			return nil
		}
	}
	return f.drop(ctx, follower)
}

// lowestEntry tells from which id a followee's posts in a feed may start —
// its lowest post entry, or 0 when the feed is whole — and the same as the
// unfollow script takes it ("-" when the feed holds no post, or is not
// there: the script then drops what is left of it).
func (f *Feeds) lowestEntry(ctx context.Context, set setKeys) (seen string, since int64, err error) {
	var metaCmd, headCmd, lowest *redis.StringCmd
	// Each command's error is its own (decodeSet tells a missing key or a
	// foreign type from a failure).
	_, _ = f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { // one moment (see readSets)
		metaCmd, headCmd, lowest = p.Get(ctx, set.meta), p.Get(ctx, set.head), p.LIndex(ctx, set.tail, 0)
		return nil
	})
	metaV, metaErr := metaCmd.Bytes()
	headV, headErr := headCmd.Bytes()
	if err := cmp.Or(failure(metaErr), failure(headErr), failure(lowest.Err())); err != nil {
		return "", 0, err
	}
	h, ok := parseSet(metaV, headV)
	switch {
	case !ok:
		return "-", 0, nil
	case h.flags&flagWhole != 0:
		return "0", 0, nil // any post of the followee may be there
	}
	// The tail's first entry, or the head's when there is no tail (the
	// lower of the two: a tail that went missing leaves the head's, and the
	// script then drops the feed).
	var id int64
	if recent := h.entries(); len(recent) > 0 {
		id = recent[0]
	}
	if first := lowest.Val(); h.tailN > 0 && len(first) >= entryLen {
		if low := unpackIDs([]byte(first[:entryLen]))[0]; id == 0 || low < id {
			id = low
		}
	}
	if id == 0 {
		return "-", 0, nil
	}
	return strconv.FormatInt(id, 10), id, nil
}

// unfollowPage is how many post ids an unfollow reads from PostgreSQL at once.
const unfollowPage = 1000
