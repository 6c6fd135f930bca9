package feed_test

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// countingStore is the real store, with its reads of feeds counted and,
// when gate is set, a rebuild's held until the test opens it.
type countingStore struct {
	*store.DB
	rebuilds atomic.Int32
	reads    atomic.Int32 // every FolloweePosts and FeedEntries
	gate     chan struct{}
	entered  chan struct{}
	// graphs counts a rebuild's reads of whom its reader follows; when
	// graphGate is set, each is held after the read until the test opens it.
	graphs       atomic.Int32
	graphGate    chan struct{}
	graphEntered chan struct{}
}

// FeedGraph is what a rebuild reads first: whom the reader follows.
func (s *countingStore) FeedGraph(ctx context.Context, user int64) (followees, hidden []int64, version int64, err error) {
	s.graphs.Add(1)
	followees, hidden, version, err = s.DB.FeedGraph(ctx, user)
	if s.graphGate != nil {
		s.graphEntered <- struct{}{}
		<-s.graphGate
	}
	return followees, hidden, version, err
}

func (s *countingStore) FolloweePosts(ctx context.Context, follower, before int64, limit int) ([]domain.Post, error) {
	s.reads.Add(1)
	return s.DB.FolloweePosts(ctx, follower, before, limit)
}

// FeedEntries is what a rebuild reads.
func (s *countingStore) FeedEntries(ctx context.Context, user int64, limit int) ([]domain.Post, error) {
	s.reads.Add(1)
	s.rebuilds.Add(1)
	if s.gate != nil {
		s.entered <- struct{}{}
		<-s.gate
	}
	return s.DB.FeedEntries(ctx, user, limit)
}

// rebuildLimit is max_len in the tests that count rebuilds: a rebuild reads
// that many posts, a page read at most 101.
const rebuildLimit = 800

type bundle struct {
	pg     *pgxpool.Pool
	db     *store.DB
	store  *countingStore
	rdb    *redis.Client
	prefix string
	feeds  *feed.Feeds
}

// newFeeds is feed.New for a configuration that is valid.
func newFeeds(t testing.TB, rdb redis.UniversalClient, st feed.Store, cfg feed.Config) *feed.Feeds {
	t.Helper()
	f, err := feed.New(rdb, st, cfg)
	require.NoError(t, err)
	return f
}

func setup(t *testing.T, cfg feed.Config) *bundle {
	t.Helper()
	var cs *countingStore
	b := setupOn(t, cfg, func(db *store.DB) feed.Store { cs = &countingStore{DB: db}; return cs })
	b.store = cs
	return b
}

// setupOn is setup with the feeds reading the real store through wrap: a
// test's own gates or counters around some of its methods.
func setupOn(t *testing.T, cfg feed.Config, wrap func(*store.DB) feed.Store) *bundle {
	t.Helper()
	pool := testenv.NewPool(t)
	db := store.New(pool, nil)
	rdb, prefix := testenv.NewRedis(t)
	cfg.Prefix = prefix
	return &bundle{pg: pool, db: db, rdb: rdb, prefix: prefix, feeds: newFeeds(t, rdb, wrap(db), cfg)}
}

func (b *bundle) post(t *testing.T, author int64) int64 {
	t.Helper()
	p, _, err := b.db.CreatePost(context.Background(), author, "post by "+strconv.FormatInt(author, 10), "")
	require.NoError(t, err)
	return p.ID
}

func (b *bundle) follow(t *testing.T, follower, followee int64) {
	t.Helper()
	_, err := b.db.Follow(context.Background(), follower, followee)
	require.NoError(t, err)
}

// now is the write position a fan-out reads before its pages of followers.
func (b *bundle) now(t *testing.T) int64 {
	t.Helper()
	at, err := b.db.WritePosition(context.Background())
	require.NoError(t, err)
	return at
}

func (b *bundle) feedKey(user int64) string {
	return feed.Key(b.prefix, user)
}

// readAll pages through the whole feed with the given page size.
func (b *bundle) readAll(t *testing.T, user int64, limit int) []int64 {
	t.Helper()
	var ids []int64
	before := int64(0)
	for range 1000 {
		page, err := b.feeds.Read(context.Background(), user, before, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Posts), limit)
		for _, p := range page.Posts {
			ids = append(ids, p.ID)
		}
		if page.Next == 0 {
			return ids
		}
		before = page.Next
	}
	t.Fatal("feed never ended")
	return nil
}

func reversed(ids []int64) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[len(ids)-1-i] = id
	}
	return out
}

func TestRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a feed never built is rebuilt from the followees' posts, newest first", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		b.follow(t, 10, 2)
		var want []int64
		for i := range 6 {
			want = append(want, b.post(t, int64(i%2+1)))
		}
		b.post(t, 3) // not followed
		require.Equal(t, reversed(want), b.readAll(t, 10, 20))
		require.EqualValues(t, 1, b.store.rebuilds.Load())
		// The next read is served by Redis.
		require.Equal(t, reversed(want), b.readAll(t, 10, 20))
		require.EqualValues(t, 1, b.store.rebuilds.Load())
	})

	t.Run("an empty feed is told apart from a missing one", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		require.Empty(t, b.readAll(t, 10, 20))
		require.Empty(t, b.readAll(t, 10, 20))
		require.EqualValues(t, 1, b.store.rebuilds.Load(), "the empty feed is not rebuilt again")
	})

	t.Run("pages go on past max_len through PostgreSQL without gaps or repeats", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{MaxLen: 5})
		b.follow(t, 10, 1)
		var want []int64
		for range 13 {
			want = append(want, b.post(t, 1))
		}
		require.Equal(t, reversed(want), b.readAll(t, 10, 4))
		stored := b.stored(t, 10)
		require.True(t, stored.Complete)
		require.Len(t, stored.IDs, 5, "max_len entries")
	})

	t.Run("a cursor is stable when posts are created between pages", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		var want []int64
		for range 5 {
			want = append(want, b.post(t, 1))
		}
		page, err := b.feeds.Read(ctx, 10, 0, 2)
		require.NoError(t, err)
		newer := b.post(t, 1)
		_, err = pushCount(b.feeds.Push(ctx, domain.Entry{PostID: newer, AuthorID: 1}, []int64{10}, b.now(t), true))
		require.NoError(t, err)
		got := []int64{page.Posts[0].ID, page.Posts[1].ID}
		for before := page.Next; before != 0; {
			p, err := b.feeds.Read(ctx, 10, before, 2)
			require.NoError(t, err)
			for _, post := range p.Posts {
				got = append(got, post.ID)
			}
			before = p.Next
		}
		require.Equal(t, reversed(want), got)
	})

	t.Run("deleted posts never show, and pages stay full around them", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		var ids []int64
		for range 8 {
			ids = append(ids, b.post(t, 1))
		}
		require.Len(t, b.readAll(t, 10, 20), 8) // built and cached
		// Deleted as the API deletes: in PostgreSQL, then hidden in the cache.
		for _, id := range ids[3:7] {
			require.NoError(t, b.db.DeletePost(ctx, id, 1))
			require.NoError(t, b.feeds.ForgetPost(ctx, id))
		}
		// Deleted while its cache entry was gone: PostgreSQL has the last word.
		require.NoError(t, b.db.DeletePost(ctx, ids[1], 1))
		require.NoError(t, b.rdb.Del(ctx, b.prefix+"post:"+strconv.FormatInt(ids[1], 10)).Err())
		page, err := b.feeds.Read(ctx, 10, 0, 3)
		require.NoError(t, err)
		require.Equal(t, []int64{ids[7], ids[2], ids[0]}, []int64{page.Posts[0].ID, page.Posts[1].ID, page.Posts[2].ID})
		require.Zero(t, page.Next, "nothing after the last live post")
		require.Equal(t, []int64{ids[7], ids[2], ids[0]}, b.readAll(t, 10, 2))
	})

	t.Run("concurrent reads of a missing feed rebuild it once", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		want := []int64{b.post(t, 1), b.post(t, 1)}
		b.store.gate, b.store.entered = make(chan struct{}), make(chan struct{}, 16)
		var wg sync.WaitGroup
		results := make([][]int64, 8)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				page, err := b.feeds.Read(ctx, 10, 0, 20)
				if err == nil {
					for _, p := range page.Posts {
						results[i] = append(results[i], p.ID)
					}
				}
			}()
		}
		<-b.store.entered // one reader is rebuilding; the others wait for it
		close(b.store.gate)
		wg.Wait()
		require.EqualValues(t, 1, b.store.rebuilds.Load())
		for _, r := range results {
			require.Equal(t, reversed(want), r)
		}
	})

	t.Run("posts pushed during a rebuild are kept", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		older := b.post(t, 1)
		b.store.gate, b.store.entered = make(chan struct{}), make(chan struct{}, 1)
		done := make(chan []int64)
		go func() {
			page, _ := b.feeds.Read(ctx, 10, 0, 20)
			var ids []int64
			for _, p := range page.Posts {
				ids = append(ids, p.ID)
			}
			done <- ids
		}()
		<-b.store.entered
		// A post created and fanned out while the rebuild reads PostgreSQL:
		// the rebuild's snapshot may miss it, the push must not.
		newer := b.post(t, 1)
		n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: newer, AuthorID: 1}, []int64{10}, b.now(t), true))
		require.NoError(t, err)
		require.Equal(t, 1, n, "the feed under rebuild accepts pushes")
		close(b.store.gate)
		require.Equal(t, []int64{newer, older}, <-done)
	})

	t.Run("a rebuild that died half-way is redone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		id := b.post(t, 1)
		// What a crashed rebuild leaves: its token in the set, not complete.
		require.NoError(t, feed.WriteBuilding(ctx, b.rdb, b.prefix, 10, 0))
		require.Equal(t, []int64{id}, b.readAll(t, 10, 20))
		stored := b.stored(t, 10)
		require.True(t, stored.Complete, "complete")
		require.False(t, stored.Building, "the crashed rebuild's token is gone")
	})

	t.Run("a feed lost with Redis comes back on read", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		id := b.post(t, 1)
		require.Equal(t, []int64{id}, b.readAll(t, 10, 20))
		require.NoError(t, b.rdb.Del(ctx, b.feedKey(10), b.prefix+"post:"+strconv.FormatInt(id, 10)).Err())
		require.Equal(t, []int64{id}, b.readAll(t, 10, 20))
		require.EqualValues(t, 2, b.store.rebuilds.Load())
	})
}

func TestPush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("writes only feeds that exist, once per post", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		b.follow(t, 11, 1)
		require.Empty(t, b.readAll(t, 10, 20)) // builds feed 10
		id := b.post(t, 1)
		n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{10, 11}, b.now(t), true))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = pushCount(b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{10, 11}, b.now(t), false))
		require.NoError(t, err)
		require.Zero(t, n, "a repeated push adds nothing")
		n, err = pushCount(b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{10, 11}, b.now(t), true))
		require.NoError(t, err)
		require.Equal(t, 1, n, "a push taken for a first one appends without looking…")
		require.Equal(t, []int64{id}, b.stored(t, 10).IDs, "…and the feed still holds the post once")
		require.Equal(t, []int64{id}, b.readAll(t, 10, 20))
		exists, err := b.rdb.Exists(ctx, b.feedKey(11)).Result()
		require.NoError(t, err)
		require.Zero(t, exists, "no feed is created for a user who never read")
		stored := b.stored(t, 10)
		require.True(t, stored.Complete && stored.Whole, "complete, whole history")
		require.Equal(t, []int64{id}, stored.IDs, "the post")
	})

	t.Run("trims to max_len keeping the newest and the marker", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{MaxLen: 3})
		b.follow(t, 10, 1)
		require.Empty(t, b.readAll(t, 10, 20))
		for id := int64(1); id <= 10; id++ {
			_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{10}, b.now(t), true))
			require.NoError(t, err)
		}
		stored := b.stored(t, 10)
		require.True(t, stored.Complete && !stored.Whole, "a complete prefix")
		require.Equal(t, []int64{8, 9, 10}, stored.IDs)
	})

	t.Run("scores are exact for the largest post id", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		require.Empty(t, b.readAll(t, 10, 20))
		const maxID = 1<<53 - 1 // the schema caps the post id sequence here
		_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: maxID, AuthorID: 1}, []int64{10}, b.now(t), true))
		require.NoError(t, err)
		_, err = pushCount(b.feeds.Push(ctx, domain.Entry{PostID: maxID - 1, AuthorID: 1}, []int64{10}, b.now(t), true))
		require.NoError(t, err)
		ids := b.stored(t, 10).IDs
		require.Equal(t, []int64{maxID - 1, maxID}, ids[len(ids)-2:])
	})

	t.Run("survives Redis forgetting its scripts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		require.Empty(t, b.readAll(t, 10, 20))
		require.NoError(t, b.rdb.ScriptFlush(ctx).Err())
		n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: 5, AuthorID: 1}, []int64{10}, b.now(t), true))
		require.NoError(t, err)
		require.Equal(t, 1, n)
	})
}

func TestFollowAndUnfollow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{Backfill: 2})
	b.follow(t, 10, 1)
	own := b.post(t, 1)
	require.Equal(t, []int64{own}, b.readAll(t, 10, 20))

	p1, p2, p3 := b.post(t, 2), b.post(t, 2), b.post(t, 2)
	b.follow(t, 10, 2)
	n, err := applyFollowState(ctx, b.db, b.feeds, 10, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "backfill merges the followee's newest posts, up to feed.backfill")
	// p1 was not merged: the feed keeps no entry below p2, and reads go on
	// in PostgreSQL there, so nothing is skipped.
	stored := b.stored(t, 10)
	require.True(t, stored.Complete && !stored.Whole, "a complete prefix")
	require.Equal(t, []int64{p2, p3}, stored.IDs)
	require.Equal(t, []int64{p3, p2, p1, own}, b.readAll(t, 10, 20))

	_, err = b.db.Unfollow(ctx, 10, 2)
	require.NoError(t, err)
	require.NoError(t, applyUnfollowState(ctx, b.db, b.feeds, 10, 2))
	require.Equal(t, []int64{own}, b.readAll(t, 10, 20))
}

func TestInactiveFeedsExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{ActiveTTL: time.Hour})
	b.follow(t, 10, 1)
	first := b.post(t, 1)
	require.Equal(t, []int64{first}, b.readAll(t, 10, 20))
	ttl, err := b.rdb.TTL(ctx, b.feedKey(10)).Result()
	require.NoError(t, err)
	require.InDelta(t, time.Hour.Seconds(), ttl.Seconds(), 5, "a read keeps the feed for feed.active_days")

	// The reader stays away: the feed expires, fan-out skips them…
	require.NoError(t, b.rdb.PExpire(ctx, b.feedKey(10), time.Millisecond).Err())
	require.Eventually(t, func() bool { return b.rdb.Exists(ctx, b.feedKey(10)).Val() == 0 }, time.Second, time.Millisecond)
	second := b.post(t, 1)
	n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: second, AuthorID: 1}, []int64{10}, b.now(t), true))
	require.NoError(t, err)
	require.Zero(t, n, "no work and no memory for a reader who is away")
	// …and their return rebuilds it, with everything.
	require.Equal(t, []int64{second, first}, b.readAll(t, 10, 20))
	ttl, err = b.rdb.TTL(ctx, b.feedKey(10)).Result()
	require.NoError(t, err)
	require.Positive(t, ttl)
}

// truth is the home feed as PostgreSQL has it: every live post of the
// people user follows, newest first.
func (b *bundle) truth(t *testing.T, user int64) []int64 {
	t.Helper()
	posts, err := b.db.FolloweePosts(context.Background(), user, math.MaxInt64, 100_000)
	require.NoError(t, err)
	ids := make([]int64, len(posts))
	for i, p := range posts {
		ids[i] = p.ID
	}
	return ids
}

func TestFeedsStayComplete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a follow after a floored follow leaves no gap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{Backfill: 3})
		b.follow(t, 10, 1)
		old := b.post(t, 4) // by somebody followed later
		for range 4 {
			b.post(t, 1)
		}
		for range 5 {
			b.post(t, 2)
		}
		require.Len(t, b.readAll(t, 10, 20), 4) // built, a prefix... or whole
		b.follow(t, 10, 2)
		_, err := applyFollowState(ctx, b.db, b.feeds, 10, 2) // 3 of 5: floored
		require.NoError(t, err)
		b.follow(t, 10, 4)
		_, err = applyFollowState(ctx, b.db, b.feeds, 10, 4) // one old post
		require.NoError(t, err)
		require.Equal(t, b.truth(t, 10), b.readAll(t, 10, 2))
		require.Contains(t, b.readAll(t, 10, 100), old)
	})

	t.Run("a late push of an old post leaves no gap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{Backfill: 2})
		b.follow(t, 10, 1)
		b.follow(t, 10, 2)
		late := b.post(t, 1) // its fan-out is late
		for range 3 {
			b.post(t, 2)
		}
		require.NoError(t, b.rdb.Del(ctx, b.feedKey(10)).Err())
		// A feed that is a prefix (floored by a follow), then the late push.
		_, err := b.db.Unfollow(ctx, 10, 2)
		require.NoError(t, err)
		require.Equal(t, []int64{late}, b.readAll(t, 10, 20)) // rebuilt: whole
		b.follow(t, 10, 2)
		_, err = applyFollowState(ctx, b.db, b.feeds, 10, 2) // floored at the second of those three
		require.NoError(t, err)
		n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: late, AuthorID: 1}, []int64{10}, b.now(t), true))
		require.NoError(t, err)
		require.Zero(t, n, "older than what the prefix holds: left to PostgreSQL")
		require.Equal(t, b.truth(t, 10), b.readAll(t, 10, 2))
	})

	t.Run("an unfollow during a rebuild is not undone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		b.follow(t, 10, 2)
		kept, dropped := b.post(t, 1), b.post(t, 2)
		b.store.gate, b.store.entered = make(chan struct{}), make(chan struct{}, 1)
		done := make(chan error)
		go func() { _, err := b.feeds.Read(ctx, 10, 0, 20); done <- err }()
		<-b.store.entered // the rebuild has read PostgreSQL with both follows
		_, err := b.db.Unfollow(ctx, 10, 2)
		require.NoError(t, err)
		require.NoError(t, applyUnfollowState(ctx, b.db, b.feeds, 10, 2))
		close(b.store.gate)
		require.NoError(t, <-done)
		b.store.gate = nil
		require.Equal(t, []int64{kept}, b.readAll(t, 10, 20))
		_ = dropped
	})

	t.Run("a delete during a rebuild stays deleted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		kept, deleted := b.post(t, 1), b.post(t, 1)
		b.store.gate, b.store.entered = make(chan struct{}), make(chan struct{}, 1)
		done := make(chan error)
		go func() { _, err := b.feeds.Read(ctx, 10, 0, 20); done <- err }()
		<-b.store.entered
		require.NoError(t, b.db.DeletePost(ctx, deleted, 1))
		require.NoError(t, b.feeds.ForgetPost(ctx, deleted))
		close(b.store.gate)
		require.NoError(t, <-done)
		b.store.gate = nil
		require.Equal(t, []int64{kept}, b.readAll(t, 10, 20))
	})

	t.Run("a small feed is read from Redis alone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		b.post(t, 1)
		b.post(t, 1)
		require.Len(t, b.readAll(t, 10, 20), 2)
		before := b.store.reads.Load()
		for range 5 {
			require.Len(t, b.readAll(t, 10, 20), 2)
		}
		require.Equal(t, before, b.store.reads.Load(), "the whole history is in Redis: no PostgreSQL read")
	})
}

// applyFollowState applies to f what PostgreSQL has of follower → followee
// now, with its version, as the API does after a follow: it returns how
// many posts the follow merged.
func applyFollowState(ctx context.Context, db *store.DB, f *feed.Feeds, follower, followee int64) (int, error) {
	st, err := db.FollowState(ctx, follower, followee)
	if err != nil {
		return 0, err
	}
	n, _, err := f.ApplyFollow(ctx, st)
	return n, err
}

// applyUnfollowState is applyFollowState after an unfollow.
func applyUnfollowState(ctx context.Context, db *store.DB, f *feed.Feeds, follower, followee int64) error {
	_, err := applyFollowState(ctx, db, f, follower, followee)
	return err
}

// pushed is what the tests count of a push: how many feeds gained it.
func pushCount(res domain.PushResult, err error) (int, error) { return res.Added, err }
