package feed_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/store"
)

// push fans an entry out to readers, as a worker does.
func (b *bundle) push(t *testing.T, e domain.Entry, readers ...int64) {
	t.Helper()
	_, err := b.feeds.Push(context.Background(), e, readers, b.now(t), true)
	require.NoError(t, err)
}

func (b *bundle) repost(t *testing.T, user, original int64) int64 {
	t.Helper()
	p, created, err := b.db.CreateRepost(context.Background(), user, original)
	require.NoError(t, err)
	require.True(t, created)
	return p.ID
}

// applyHides applies the hide states a relation change left, as the API does.
func (b *bundle) applyHides(t *testing.T, ch domain.RelationChange) {
	t.Helper()
	for _, st := range ch.Hides {
		_, err := b.feeds.ApplyHide(context.Background(), st)
		require.NoError(t, err)
	}
}

// TestOwnPostsAreInTheFeed: a rebuild holds the reader's own posts, and
// PushOwn puts a new one in at once.
func TestOwnPostsAreInTheFeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	first := b.post(t, 10)
	require.Equal(t, []int64{first}, b.readAll(t, 10, 20), "the rebuild reads the reader's own posts")
	second := b.post(t, 10)
	require.NoError(t, b.feeds.PushOwn(ctx, domain.Entry{PostID: second, AuthorID: 10}))
	reads := b.store.reads.Load()
	require.Equal(t, []int64{second, first}, b.readAll(t, 10, 20))
	require.Equal(t, reads, b.store.reads.Load(), "read from Redis alone")
	// The fan-out's push of the same post finds it there.
	res, err := b.feeds.Push(ctx, domain.Entry{PostID: second, AuthorID: 10}, []int64{10}, 0, false)
	require.NoError(t, err)
	require.Zero(t, res.Added)
	require.Equal(t, []int64{second, first}, b.readAll(t, 10, 20))
}

// TestMuteHidesAtOnceAndUnmuteShowsAgain: the entries stay in the feed,
// the read filters them, and an older state applied late changes nothing.
func TestMuteHidesAtOnceAndUnmuteShowsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	b.follow(t, 10, 2)
	p1 := b.post(t, 1)
	p2 := b.post(t, 2)
	require.Equal(t, []int64{p2, p1}, b.readAll(t, 10, 20))
	// 2 reposts 1's post: the original shows, not the repost.
	r := b.repost(t, 2, p1)
	b.push(t, domain.Entry{PostID: r, AuthorID: 2}, 10)
	require.Equal(t, []int64{p2, p1}, b.readAll(t, 10, 20))

	muted, err := b.db.Mute(ctx, 10, 1)
	require.NoError(t, err)
	b.applyHides(t, muted)
	reads := b.store.reads.Load()
	require.Equal(t, []int64{p2}, b.readAll(t, 10, 20), "the muted author's post and the repost of it are hidden")
	require.Equal(t, reads, b.store.reads.Load(), "Redis alone")

	unmuted, err := b.db.Unmute(ctx, 10, 1)
	require.NoError(t, err)
	b.applyHides(t, unmuted)
	require.Equal(t, []int64{p2, p1}, b.readAll(t, 10, 20), "shown again, without a merge")

	// The mute's state, applied late, is stale.
	applied, err := b.feeds.ApplyHide(ctx, muted.Hides[0])
	require.NoError(t, err)
	require.False(t, applied)
	require.Equal(t, []int64{p2, p1}, b.readAll(t, 10, 20))
}

// TestRepostShowsOnceAndTheNextWhenItGoes: reader follows two reposters of
// a post whose author they do not follow.
func TestRepostShowsOnceAndTheNextWhenItGoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 2)
	b.follow(t, 10, 3)
	p := b.post(t, 1)
	r2 := b.repost(t, 2, p)
	b.push(t, domain.Entry{PostID: r2, AuthorID: 2}, 10)
	r3 := b.repost(t, 3, p)
	b.push(t, domain.Entry{PostID: r3, AuthorID: 3}, 10)
	require.Equal(t, []int64{r2}, b.readAll(t, 10, 20), "the first repost shows, once")

	require.NoError(t, b.db.DeletePost(ctx, r2, 2))
	require.NoError(t, b.feeds.ForgetPost(ctx, r2))
	require.Equal(t, []int64{r3}, b.readAll(t, 10, 20), "deleting it brings the next")

	b.follow(t, 10, 1)
	_, err := applyFollowState(ctx, b.db, b.feeds, 10, 1)
	require.NoError(t, err)
	require.Equal(t, []int64{p}, b.readAll(t, 10, 20), "following the author shows the original")

	blocked, err := b.db.Block(ctx, 1, 10)
	require.NoError(t, err)
	for _, u := range blocked.Unfollow {
		_, _, err := b.feeds.ApplyFollow(ctx, u.EdgeState)
		require.NoError(t, err)
	}
	b.applyHides(t, blocked)
	require.Empty(t, b.readAll(t, 10, 20), "a block by the author hides every repost of the post")
	page, err := b.db.FolloweePosts(ctx, 10, 1<<62, 20)
	require.NoError(t, err)
	require.Empty(t, page, "PostgreSQL says the same")
}

// TestFeedOfAnOlderVersionIsRebuilt: a following hash without the hides
// field is from before mutes and blocks, and the read rebuilds it.
func TestFeedOfAnOlderVersionIsRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	p := b.post(t, 1)
	require.Equal(t, []int64{p}, b.readAll(t, 10, 20))
	_, err := b.db.Mute(ctx, 10, 1)
	require.NoError(t, err)
	// The older version's hash: no "x", and the mute not applied.
	require.NoError(t, b.rdb.HDel(ctx, b.prefix+"follows:{10}", "x").Err())
	rebuilds := b.store.rebuilds.Load()
	require.Empty(t, b.readAll(t, 10, 20))
	require.Equal(t, rebuilds+1, b.store.rebuilds.Load())
}

// repeatsHook runs hook once, just before a Repeats query: a graph change
// that commits while a read is between its Redis step and its PostgreSQL
// one.
type repeatsHook struct {
	*store.DB
	once sync.Once
	hook func()
}

func (s *repeatsHook) Repeats(ctx context.Context, user int64, hides, reposts, page []int64) (repeats, deleted map[int64]bool, err error) {
	s.once.Do(func() {
		if s.hook != nil {
			s.hook()
		}
	})
	return s.DB.Repeats(ctx, user, hides, reposts, page)
}

// TestMuteBetweenRedisAndRepeatsShowsTheOriginalOnce: the page must be the
// feed at one moment, though its hidden users come from Redis and its
// repeats from PostgreSQL (a reviewer's probe).
func TestMuteBetweenRedisAndRepeatsShowsTheOriginalOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rh *repeatsHook
	b := setupOn(t, feed.Config{}, func(db *store.DB) feed.Store { rh = &repeatsHook{DB: db}; return rh })
	b.follow(t, 10, 2)
	b.follow(t, 10, 3)
	o := b.post(t, 1) // by someone 10 does not follow
	r1 := b.repost(t, 2, o)
	r2 := b.repost(t, 3, o)
	b.readAll(t, 10, 20) // builds the feed
	b.push(t, domain.Entry{PostID: r1, AuthorID: 2}, 10)
	b.push(t, domain.Entry{PostID: r2, AuthorID: 3}, 10)
	for _, tc := range []struct {
		name   string
		change func() (domain.RelationChange, error)
		want   int64
	}{
		{"mute", func() (domain.RelationChange, error) { return b.db.Mute(ctx, 10, 2) }, r2},
		{"unmute", func() (domain.RelationChange, error) { return b.db.Unmute(ctx, 10, 2) }, r1},
	} {
		var ch domain.RelationChange
		rh.once = sync.Once{}
		rh.hook = func() {
			// As the API does: mark, commit; the application comes later.
			_, err := b.feeds.MarkGraphChange(ctx, 10)
			require.NoError(t, err)
			ch, err = tc.change()
			require.NoError(t, err)
		}
		page, err := b.feeds.Read(ctx, 10, 0, 20)
		require.NoError(t, err)
		var ids []int64
		for _, p := range page.Posts {
			ids = append(ids, p.ID)
		}
		require.Equal(t, []int64{tc.want}, ids, "%s: one entry of the original (r1=%d r2=%d)", tc.name, r1, r2)
		rh.hook = nil
		b.applyHides(t, ch)
		require.NoError(t, b.rdb.Del(ctx, b.prefix+"changes:{10}").Err())
		require.Equal(t, []int64{tc.want}, b.readAll(t, 10, 20), "%s, applied", tc.name)
	}
}

// TestRepostGoesWithItsOriginal: a delete takes the original's reposts
// with it, in one transaction; between the original's tombstone and the
// reposts' (ForgetPost, one post at a time), a read shows neither — not
// the cached repost in place of its original (TestFeedModelConcurrent on
// a Redis Cluster, where each ForgetPost goes to another node).
func TestRepostGoesWithItsOriginal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	p := b.post(t, 1)
	r := b.repost(t, 10, p)
	b.push(t, domain.Entry{PostID: r, AuthorID: 10}, 10)
	require.Equal(t, []int64{p}, b.readAll(t, 10, 20), "the original shows, once; both are cached")

	undo, err := b.feeds.MarkDeleting(ctx, p)
	require.NoError(t, err)
	gone, err := b.db.DeletePostAndReposts(ctx, p, 1)
	require.NoError(t, err)
	require.Equal(t, []int64{r}, gone)
	require.Empty(t, b.readAll(t, 10, 20), "the delete's mark: the original is gone, so is its repost")
	require.NoError(t, b.feeds.ForgetPost(ctx, p))
	require.Empty(t, b.readAll(t, 10, 20), "the original's tombstone, the repost still cached")
	require.NoError(t, b.feeds.ForgetPost(ctx, r))
	require.Empty(t, b.readAll(t, 10, 20))
	undo()
}

// TestDeleteBetweenRedisAndRepeatsShowsTheFeedAtOneMoment: a delete that
// commits after the page's posts came from the cache and before its
// repeats came from PostgreSQL must not show an original and its repost
// both (TestFeedModelConcurrent: "shows [6 (deleted) 5 (deleted)]").
func TestDeleteBetweenRedisAndRepeatsShowsTheFeedAtOneMoment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rh *repeatsHook
	b := setupOn(t, feed.Config{}, func(db *store.DB) feed.Store { rh = &repeatsHook{DB: db}; return rh })
	b.follow(t, 10, 1)
	p := b.post(t, 1)
	r := b.repost(t, 10, p)
	b.push(t, domain.Entry{PostID: r, AuthorID: 10}, 10)
	require.Equal(t, []int64{p}, b.readAll(t, 10, 20), "the original shows, once; both are cached")
	rh.once = sync.Once{}
	rh.hook = func() {
		// As the API does: mark, commit; the tombstones come later.
		_, err := b.feeds.MarkDeleting(ctx, p)
		require.NoError(t, err)
		_, err = b.db.DeletePostAndReposts(ctx, p, 1)
		require.NoError(t, err)
	}
	page, err := b.feeds.Read(ctx, 10, 0, 20)
	require.NoError(t, err)
	var ids []int64
	for _, post := range page.Posts {
		ids = append(ids, post.ID)
	}
	if len(ids) > 0 {
		require.Equal(t, []int64{p}, ids, "before the delete: the original alone (p=%d r=%d)", p, r)
	}
	require.Empty(t, b.readAll(t, 10, 20), "after it: nothing")
}

// postsByIDHook runs hook (once) when a read first asks PostgreSQL for
// posts the cache lacks: between the read of the feed's ids and their
// hydration.
type postsByIDHook struct {
	*store.DB
	once sync.Once
	hook func()
}

func (s *postsByIDHook) PostsByID(ctx context.Context, ids []int64) ([]domain.Post, error) {
	s.once.Do(func() {
		if s.hook != nil {
			s.hook()
		}
	})
	return s.DB.PostsByID(ctx, ids)
}

// TestDeleteAfterAPostDuringARead: a read takes the feed's ids, then a
// post is made (in the feed at once), then an older post is deleted, all
// before the read hydrates the ids. The page must be the feed at one
// moment: not without the delete's post and the new one both
// (TestFeedModelConcurrent: "misses [122 (by 900402)]" beside a delete).
func TestDeleteAfterAPostDuringARead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var ph *postsByIDHook
	b := setupOn(t, feed.Config{}, func(db *store.DB) feed.Store { ph = &postsByIDHook{DB: db}; return ph })
	old := b.post(t, 10)
	require.Equal(t, []int64{old}, b.readAll(t, 10, 20))
	require.NoError(t, b.rdb.Del(ctx, b.prefix+"post:"+strconv.FormatInt(old, 10)).Err(), "not cached: the read asks PostgreSQL")
	var fresh int64
	ph.hook = func() {
		fresh = b.post(t, 10)
		require.NoError(t, b.feeds.PushOwn(ctx, domain.Entry{PostID: fresh, AuthorID: 10}))
		undo, err := b.feeds.MarkDeleting(ctx, old)
		require.NoError(t, err)
		defer undo()
		require.NoError(t, b.db.DeletePost(ctx, old, 10))
		require.NoError(t, b.feeds.ForgetPost(ctx, old))
	}
	page, err := b.feeds.Read(ctx, 10, 0, 20)
	require.NoError(t, err)
	var ids []int64
	for _, p := range page.Posts {
		ids = append(ids, p.ID)
	}
	require.NotEmpty(t, ids, "before the new post: the old one; after the delete: the new one; never neither")
	require.Equal(t, []int64{fresh}, b.readAll(t, 10, 20))
}

// TestHydrationAtOneMoment: the cache has one post of a page and lacks
// another; the first is deleted, then the second, before PostgreSQL is
// asked for the second. The page must not show the first without the
// second: the first was deleted before (a reviewer's probe).
func TestHydrationAtOneMoment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var ph *postsByIDHook
	b := setupOn(t, feed.Config{}, func(db *store.DB) feed.Store { ph = &postsByIDHook{DB: db}; return ph })
	older := b.post(t, 10)
	newer := b.post(t, 10)
	require.Equal(t, []int64{newer, older}, b.readAll(t, 10, 20), "both cached")
	require.NoError(t, b.rdb.Del(ctx, b.prefix+"post:"+strconv.FormatInt(older, 10)).Err(), "the older one not")
	ph.once = sync.Once{}
	ph.hook = func() {
		for _, id := range []int64{newer, older} { // the cached one first
			require.NoError(t, b.db.DeletePost(ctx, id, 10))
		}
	}
	page, err := b.feeds.Read(ctx, 10, 0, 20)
	require.NoError(t, err)
	var ids []int64
	for _, p := range page.Posts {
		ids = append(ids, p.ID)
	}
	require.Empty(t, ids, "both deleted as PostgreSQL answered; no moment held %d without %d", newer, older)
}

// roundsFeed makes reader 10's feed: 1's posts p1, p2, p3 with two posts
// of 2, whom 10 mutes, between p2 and p3; p3 is not in the post cache. A
// page of one or two takes two rounds, and the first asks PostgreSQL for
// p3: ph's hook runs between the rounds.
func roundsFeed(t *testing.T) (b *bundle, ph *postsByIDHook, p1, p2, p3 int64) {
	t.Helper()
	ctx := context.Background()
	b = setupOn(t, feed.Config{}, func(db *store.DB) feed.Store { ph = &postsByIDHook{DB: db}; return ph })
	b.follow(t, 10, 1)
	b.follow(t, 10, 2)
	p1, p2 = b.post(t, 1), b.post(t, 1)
	b.post(t, 2)
	b.post(t, 2)
	p3 = b.post(t, 1)
	require.Len(t, b.readAll(t, 10, 20), 5)
	muted, err := b.db.Mute(ctx, 10, 2)
	require.NoError(t, err)
	b.applyHides(t, muted)
	require.Equal(t, []int64{p3, p2, p1}, b.readAll(t, 10, 20))
	require.NoError(t, b.rdb.Del(ctx, b.prefix+"post:"+strconv.FormatInt(p3, 10)).Err(), "the first round asks PostgreSQL")
	ph.once = sync.Once{}
	return b, ph, p1, p2, p3
}

// TestUnfollowBetweenRoundsOfAPage: a page's first round loses entries (a
// muted author's) and reads on; an unfollow is applied between its rounds.
// The page must be the feed before the unfollow or after it, not its first
// round from before and the rest from after (a reviewer's probe).
func TestUnfollowBetweenRoundsOfAPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, ph, p1, p2, p3 := roundsFeed(t)
	ph.hook = func() {
		_, err := b.db.Unfollow(ctx, 10, 1)
		require.NoError(t, err)
		require.NoError(t, applyUnfollowState(ctx, b.db, b.feeds, 10, 1))
	}
	page, err := b.feeds.Read(ctx, 10, 0, 1)
	require.NoError(t, err)
	if len(page.Posts) > 0 {
		require.Equal(t, p3, page.Posts[0].ID)
		require.NotZero(t, page.Next, "before the unfollow, %d and %d come next", p2, p1)
	}
	require.Empty(t, b.readAll(t, 10, 20), "after it")
}

// TestPushAndDeleteBetweenRoundsOfAPage: a page's first round loses
// entries and reads on; between its rounds a post is pushed above it and
// then an older one is deleted, which the second round leaves out. The
// page must not join the first round's moment (before the push) to the
// second's (after the delete) (a reviewer's probe).
func TestPushAndDeleteBetweenRoundsOfAPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, ph, p1, p2, p3 := roundsFeed(t)
	var p4 int64
	ph.hook = func() {
		p4 = b.post(t, 1)
		b.push(t, domain.Entry{PostID: p4, AuthorID: 1}, 10)
		undo, err := b.feeds.MarkDeleting(ctx, p2)
		require.NoError(t, err)
		defer undo()
		require.NoError(t, b.db.DeletePost(ctx, p2, 1))
		require.NoError(t, b.feeds.ForgetPost(ctx, p2))
	}
	page, err := b.feeds.Read(ctx, 10, 0, 2)
	require.NoError(t, err)
	var ids []int64
	for _, p := range page.Posts {
		ids = append(ids, p.ID)
	}
	require.Contains(t, [][]int64{{p3, p2}, {p4, p3}}, ids, "before the push, or after the delete")
	require.Equal(t, []int64{p4, p3, p1}, b.readAll(t, 10, 20))
}

// TestAMarkLeftBehindExpiresOnTime: a change whose mark was never taken
// away (its push failed, its request timed out) sends its reader's reads
// to PostgreSQL until its own expiry, not for as long as the reader goes
// on changing things (each change has its own mark).
func TestAMarkLeftBehindExpiresOnTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	p := b.post(t, 10)
	require.Equal(t, []int64{p}, b.readAll(t, 10, 20))
	key := b.prefix + "changes:{10}"
	require.NoError(t, b.rdb.ZAdd(ctx, key, redis.Z{Score: float64(time.Now().Add(-time.Millisecond).UnixMilli()), Member: "left"}).Err(),
		"a mark left behind, expired just now")
	unmark, err := b.feeds.MarkGraphChange(ctx, 10)
	require.NoError(t, err)
	reads := b.store.reads.Load()
	b.readAll(t, 10, 20)
	require.Greater(t, b.store.reads.Load(), reads, "a change in flight: PostgreSQL")
	unmark()
	reads = b.store.reads.Load()
	require.Equal(t, []int64{p}, b.readAll(t, 10, 20))
	require.Equal(t, reads, b.store.reads.Load(), "the expired mark does not count: Redis")
	n, err := b.rdb.ZCard(ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "and the next mark took it out")
}
