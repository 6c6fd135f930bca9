package feed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
)

// ApplyFollow applies st — whether the reader follows the followee, as of a
// version of the reader's graph — to the reader's feed and following hash,
// unless Redis holds the state of a newer version already (then a state
// applied late, by a request stalled after its commit or an event handled
// after a newer change, changes nothing). A follow merges up to Backfill
// recent posts of the followee and returns how many were new; an unfollow
// removes the followee's posts. Applying the same state twice is safe: the
// second completes what a failed first one left. applied is false when
// the state was stale.
//
// A reader who follows more accounts than FollowingThreshold keeps no feed
// (see markFollowsMany): a follow that leaves them over it drops their
// feed instead, and the next read finds them over it and reads PostgreSQL
// from then on; an unfollow that leaves them under it clears their mark,
// and the next read decides again. Both are right for a stale state too: a
// feed dropped is rebuilt from the truth, and a reader without the mark is
// counted again by that rebuild.
func (f *Feeds) ApplyFollow(ctx context.Context, st domain.EdgeState) (added int, applied bool, err error) {
	if st.Follower == st.Followee {
		return 0, false, nil // a feed always holds its reader's own posts
	}
	since := f.replicas.Begin(ctx, f.keys.feed(st.Follower), f.keys.following(st.Follower))
	switch {
	case st.Following && f.overFollowingThreshold(st.Followees):
		err = f.drop(ctx, st.Follower)
	case st.Following:
		added, err = f.followed(ctx, st)
	default:
		err = f.unfollowed(ctx, st)
		if err == nil || errors.Is(err, errStale) {
			err = cmp.Or(f.unmarkFollowsMany(ctx, st), err)
		}
	}
	if errors.Is(err, errStale) {
		return 0, false, nil
	}
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return added, false, fmt.Errorf("apply follow state to feed %d: %w", st.Follower, err)
	}
	return added, true, nil
}

// unmarkFollowsMany clears the mark of a reader who follows many when
// st, an unfollow, leaves them under FollowingThreshold (a block's
// unfollows do not count: they clear it always).
func (f *Feeds) unmarkFollowsMany(ctx context.Context, st domain.EdgeState) error {
	if f.cfg.FollowingThreshold == 0 || f.overFollowingThreshold(st.Followees) {
		return nil
	}
	return f.rdb.Del(ctx, f.keys.followsMany(st.Follower)).Err()
}

// MarkGraphChange marks, for a moment, a change of userID's feed in
// flight, before it commits: a follow, an unfollow, a mute, a block, or a
// post or repost of theirs. From its commit to its application in Redis,
// PostgreSQL shows the change and Redis does not yet (or, for a follow,
// only in part: fan-outs that read their pages of followers after the
// commit push the followee's new posts into the feed before its older ones
// are merged). While a mark stands, reads take their pages from PostgreSQL
// — one snapshot each, never older than the one before — so that no read
// shows a change half done, or undone after a read showed it. Call unmark
// once the change is applied; a change whose application failed leaves its
// mark to expire (graphMarkTTL), and reads meanwhile come from PostgreSQL,
// which has it. Each change has a mark of its own, in a sorted set scored
// by when it expires, so that a mark left behind expires on time however
// often the user changes things after it. An error (Redis down) leaves
// nothing to undo.
func (f *Feeds) MarkGraphChange(ctx context.Context, userID int64) (unmark func(), err error) {
	key := f.keys.graphMarks(userID)
	token := strconv.FormatUint(rand.Uint64(), 36)
	now := time.Now()
	_, err = f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(now.UnixMilli(), 10)) // marks left behind
		p.ZAdd(ctx, key, redis.Z{Score: float64(now.Add(graphMarkTTL).UnixMilli()), Member: token})
		p.PExpire(ctx, key, graphMarkTTL)
		return nil
	})
	if err != nil {
		return func() {}, fmt.Errorf("mark graph change of %d: %w", userID, err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = f.rdb.ZRem(ctx, key, token).Err() // it expires anyway
	}, nil
}

// graphMarkTTL bounds a change's mark: longer than any request lasts and
// than the change's event usually takes to apply it after a failure.
const graphMarkTTL = 10 * time.Second

// markedNow reads, in a pipeline, whether any change of userID's is in
// flight: a mark that has not expired (MarkGraphChange).
func (f *Feeds) markedNow(ctx context.Context, p redis.Pipeliner, userID int64) *redis.IntCmd {
	return p.ZCount(ctx, f.keys.graphMarks(userID), strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf")
}

// errStale says that Redis holds a newer follow state than the one applied.
var errStale = errors.New("a newer follow state is applied")

// staleAnswer is what the follow and unfollow scripts answer for a stale
// state.
const staleAnswer = -2

// followed records that the reader follows the followee and merges up to
// Backfill recent posts of the followee into the reader's feed (if it
// exists), keeping the feed a complete prefix: when the followee may have
// older posts than those merged, the feed keeps only what is at or above
// the oldest one merged (with no backfill: what is newer than the
// followee's newest post), and reads find the rest in PostgreSQL. The
// follow is recorded before the posts are read, so that a post of the
// followee committed after the read is pushed, not refused.
func (f *Feeds) followed(ctx context.Context, st domain.EdgeState) (int, error) {
	keys := append(f.keys.feedSet(st.Follower).list(), f.keys.following(st.Follower))
	there, err := followScript.Run(ctx, f.rdb, keys, st.Followee, f.ttlSeconds(), st.Version).Int()
	if err != nil {
		return 0, err
	}
	switch there {
	case staleAnswer:
		return 0, errStale
	case 0:
		return 0, nil // no feed (any more): the next read rebuilds it
	}
	ids, err := f.store.AuthorPostIDsSince(ctx, st.Followee, 0, max(f.cfg.Backfill, 1))
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
	args := append([]any{f.cfg.MaxLen, floor, st.Followee, st.Version}, int64sToArgs(ids)...)
	return mergeScript.Run(ctx, f.rdb, keys, args...).Int()
}

// unfollowed records that the reader no longer follows the followee and
// removes the followee's posts from the reader's feed without scanning it:
// every post of the followee that the feed holds is at or above the feed's
// lowest entry (at any id, if the feed is whole), so those ids are read
// from PostgreSQL, a page at a time, and removed. Pushes of the followee's
// posts are refused from then on (the following hash no longer lists them
// as followed), so nothing comes back. Should the feed change under the
// read so that the ids may not cover it, it looks again; a feed that keeps
// changing is dropped, to be rebuilt by the next read.
func (f *Feeds) unfollowed(ctx context.Context, st domain.EdgeState) error {
	follower, followee := st.Follower, st.Followee
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
		args := append([]any{followee, f.ttlSeconds(), seen, asOf, st.Version}, int64sToArgs(ids)...)
		n, err := unfollowScript.Run(ctx, f.rdb, keys, args...).Int()
		if err != nil {
			return err
		}
		switch {
		case n == staleAnswer:
			return errStale
		case n >= 0:
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
