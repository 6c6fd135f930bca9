package feed_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/store"
)

// The findings of a review of the feed's invariant, each as the sequence
// that broke it. Every test here failed on the code before its fix.

// redisHook runs before on every command (alone or in a pipeline) before it
// is sent, and counts the commands.
type redisHook struct {
	before   func(cmd redis.Cmder)
	commands atomic.Int64
}

func (h *redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(cmd)
		return next(ctx, cmd)
	}
}

func (h *redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.see(c)
		}
		return next(ctx, cmds)
	}
}

func (h *redisHook) see(cmd redis.Cmder) {
	if name := cmd.Name(); name == "multi" || name == "exec" {
		return
	}
	h.commands.Add(1)
	if h.before != nil {
		h.before(cmd)
	}
}

// names reports whether any argument of cmd is key.
func names(cmd redis.Cmder, key string) bool {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && s == key {
			return true
		}
	}
	return false
}

func ids(posts []domain.Post) []int64 {
	out := make([]int64, len(posts))
	for i, p := range posts {
		out[i] = p.ID
	}
	return out
}

// feedMembers returns the post ids a feed holds in Redis, whatever reads
// would show of them.
func (b *bundle) feedMembers(t *testing.T, user int64) []int64 {
	t.Helper()
	return b.stored(t, user).IDs
}

// stored is a feed as Redis holds it.
func (b *bundle) stored(t *testing.T, user int64) feed.Stored {
	t.Helper()
	s, err := feed.Inspect(context.Background(), b.rdb, b.prefix, user)
	require.NoError(t, err)
	return s
}

func (b *bundle) unfollow(t *testing.T, follower, followee int64) {
	t.Helper()
	_, err := b.db.Unfollow(context.Background(), follower, followee)
	require.NoError(t, err)
	require.NoError(t, applyUnfollowState(context.Background(), b.db, b.feeds, follower, followee))
}

// A feed.max_len of thousands: an unfollow must still remove every post of
// the followee (a single ZREM of them all overflows Lua's unpack).
func TestUnfollowOfAFeedOfNineThousand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupOn(t, feed.Config{MaxLen: 9000}, func(db *store.DB) feed.Store { return db })
	b.follow(t, 10, 1)
	_, err := b.pg.Exec(ctx, `INSERT INTO posts (author_id, body) SELECT 1, 'x' FROM generate_series(1, 9000)`)
	require.NoError(t, err)
	page, err := b.feeds.Read(ctx, 10, 0, 1)
	require.NoError(t, err)
	require.Len(t, page.Posts, 1)
	require.Len(t, b.feedMembers(t, 10), 9000)

	b.unfollow(t, 10, 1)
	require.Empty(t, b.feedMembers(t, 10))
	page, err = b.feeds.Read(ctx, 10, 0, 20)
	require.NoError(t, err)
	require.Empty(t, page.Posts)
}

// A fan-out that read its page of followers before an unfollow may write the
// post after the unfollow's clean-up: reads must not show it.
func TestPushAfterUnfollowNeverShows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	b.follow(t, 10, 2)
	kept := b.post(t, 2)
	require.Equal(t, []int64{kept}, b.readAll(t, 10, 20))
	late := b.post(t, 1) // its fan-out read follower 10 before the unfollow…
	asOf := b.now(t)
	b.unfollow(t, 10, 1)
	n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: late, AuthorID: 1}, []int64{10}, asOf, true)) // …and writes after it
	require.NoError(t, err)
	require.Zero(t, n, "the feed refuses a post of an author its reader does not follow")
	require.Equal(t, []int64{kept}, b.readAll(t, 10, 20))
	require.Equal(t, []int64{kept}, b.readAll(t, 10, 1))
}

// With feed.backfill 0, a follow merges nothing: a feed that held the whole
// history must stop saying so, or the new followee's posts never show.
func TestFollowWithoutBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{Backfill: 0})
	b.follow(t, 10, 1)
	older := b.post(t, 2) // by the followee-to-be
	mine := b.post(t, 1)
	require.Equal(t, []int64{mine}, b.readAll(t, 10, 20), "a whole feed: one post")
	b.follow(t, 10, 2)
	_, err := applyFollowState(ctx, b.db, b.feeds, 10, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{mine, older}, b.readAll(t, 10, 20))
	require.Equal(t, []int64{mine, older}, b.readAll(t, 10, 1))
}

// gatedStore holds each feed rebuild after it read PostgreSQL, until the
// test lets it go: what a slow rebuild looks like from outside. The n-th
// rebuild signals entered and waits for gates[n] (or for release, past the
// gates).
type gatedStore struct {
	*store.DB
	maxLen  int
	entered chan struct{}
	gates   []chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

// FeedEntries is what a rebuild reads.
func (s *gatedStore) FeedEntries(ctx context.Context, user int64, limit int) ([]domain.Post, error) {
	posts, err := s.DB.FeedEntries(ctx, user, limit)
	if limit == s.maxLen { // a rebuild
		n := int(s.calls.Add(1)) - 1
		s.entered <- struct{}{}
		if n < len(s.gates) {
			<-s.gates[n]
		} else {
			<-s.release
		}
	}
	return posts, err
}

// A rebuild slower than its lock must not finish over a newer rebuild's
// placeholder with what it read before an unfollow.
func TestRebuildThatOutlivedItsLockGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first, second := make(chan struct{}), make(chan struct{})
	b, gs := gatedBundle(t, feed.Config{MaxLen: 50}, first, second)
	b.follow(t, 10, 1)
	b.follow(t, 10, 2)
	gone := b.post(t, 1)
	kept := b.post(t, 2)

	firstRead := b.readAsync(t, 10)
	<-gs.entered // the first rebuild read PostgreSQL: both posts
	b.unfollow(t, 10, 1)
	// Its lock runs out; the next reader rebuilds, after the unfollow.
	require.NoError(t, b.rdb.Del(ctx, b.prefix+"feedlock:{10}").Err())
	secondRead := b.readAsync(t, 10)
	<-gs.entered
	close(first) // the first rebuild finishes now, late…
	<-firstRead
	close(second) // …then the second
	<-secondRead

	require.NotContains(t, b.feedMembers(t, 10), gone, "the late rebuild wrote what it read before the unfollow")
	require.Equal(t, []int64{kept}, b.readAll(t, 10, 20))
}

// Readers of one missing feed rebuild it once: the others wait for the first
// reader's rebuild while it runs (each of them tried the lock first).
func TestConcurrentReadsRebuildOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var gs *gatedStore
	b := setupOn(t, feed.Config{}, func(db *store.DB) feed.Store {
		gs = &gatedStore{DB: db, maxLen: 800, entered: make(chan struct{}, 8), release: make(chan struct{})}
		return gs
	})
	lock := b.prefix + "feedlock:{10}"
	var lockTries atomic.Int64
	b.rdb.AddHook(&redisHook{before: func(cmd redis.Cmder) {
		if cmd.Name() == "set" && names(cmd, lock) {
			lockTries.Add(1)
		}
	}})
	b.follow(t, 10, 1)
	want := []int64{b.post(t, 1), b.post(t, 1)}
	slices.Reverse(want)

	results := make([][]int64, 8)
	var wg sync.WaitGroup
	read := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			page, err := b.feeds.Read(ctx, 10, 0, 20)
			if err != nil {
				t.Errorf("read: %v", err)
			}
			results[i] = ids(page.Posts)
		}()
	}
	read(0)
	<-gs.entered // the first reader is rebuilding
	for i := 1; i < len(results); i++ {
		read(i)
	}
	// Every other reader tried the lock while the rebuild ran.
	require.Eventually(t, func() bool { return lockTries.Load() >= int64(len(results)) }, 30*time.Second, time.Millisecond)
	close(gs.release)
	wg.Wait()
	require.Empty(t, gs.entered, "one rebuild only")
	for _, r := range results {
		require.Equal(t, want, r)
	}
}

// While another reader holds a rebuild longer than feed.rebuild_wait, a read
// answers from PostgreSQL, with the right posts.
func TestRebuildWaitRunsOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{RebuildWait: 50 * time.Millisecond})
	b.follow(t, 10, 1)
	want := []int64{b.post(t, 1), b.post(t, 1), b.post(t, 1)}
	slices.Reverse(want)
	// Another reader's rebuild, stuck: its lock, its token in the set.
	require.NoError(t, b.rdb.Set(ctx, b.prefix+"feedlock:{10}", "someone else", time.Minute).Err())
	require.NoError(t, feed.WriteBuilding(ctx, b.rdb, b.prefix, 10, time.Minute))
	require.Equal(t, want, b.readAll(t, 10, 2))
	require.Equal(t, int32(0), b.store.rebuilds.Load(), "this reader did not rebuild")
	require.False(t, b.stored(t, 10).Complete, "and the feed is still not complete")
}

// celebrityBundle sets up authors 1001..1000+n with two followers each (the
// reader 10 and user 11), pulled at read time with threshold 1, each with posts in
// their timeline as the worker writes them.
func celebrityBundle(t *testing.T, n int) (*bundle, []int64) {
	t.Helper()
	ctx := context.Background()
	b := setup(t, feed.Config{CelebrityThreshold: 1, Backfill: 5})
	var posts []int64
	for c := int64(1001); c <= int64(1000+n); c++ {
		b.follow(t, 10, c)
		b.follow(t, 11, c)
		require.NoError(t, b.db.MarkPulled(ctx, c))
		id := b.post(t, c)
		require.NoError(t, b.feeds.AddToTimeline(ctx, domain.Entry{PostID: id, AuthorID: c}))
		posts = append(posts, id)
	}
	slices.Reverse(posts)
	return b, posts
}

// The celebrities a reader follows are cached; a list read before an
// unfollow and cached after it must never be used.
func TestCelebrityListCachedAcrossAnUnfollow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, posts := celebrityBundle(t, 2)
	celebs := b.prefix + "celebs:{10}"
	paused := make(chan struct{})
	resume := make(chan struct{})
	var once sync.Once
	b.rdb.AddHook(&redisHook{before: func(cmd redis.Cmder) {
		if n := cmd.Name(); (n == "set" || n == "sadd") && names(cmd, celebs) {
			once.Do(func() { close(paused); <-resume })
		}
	}})
	done := make(chan []int64)
	go func() {
		page, err := b.feeds.Read(ctx, 10, 0, 20)
		if err != nil {
			t.Errorf("read: %v", err)
		}
		done <- ids(page.Posts)
	}()
	<-paused // the reader learned its celebrities and is about to cache them
	b.unfollow(t, 10, 1001)
	close(resume)
	<-done
	require.Equal(t, posts[:1], ids(mustRead(t, b, 10)), "celebrity 1's post is gone with the unfollow")
}

func mustRead(t *testing.T, b *bundle, user int64) []domain.Post {
	t.Helper()
	page, err := b.feeds.Read(context.Background(), user, 0, 20)
	require.NoError(t, err)
	return page.Posts
}

// A reader who follows several celebrities whose timelines Redis lost gets
// them rebuilt at once, not one after another.
func TestMissingTimelinesRebuiltTogether(t *testing.T) {
	t.Parallel()
	b, posts := celebrityBundle(t, 3)
	require.Equal(t, posts, b.readAll(t, 10, 20))
	ctx := context.Background()
	for c := 1001; c <= 1003; c++ {
		require.NoError(t, b.rdb.Del(ctx, fmt.Sprintf("%stimeline:{%d}", b.prefix, c)).Err())
	}
	var loads atomic.Int64
	release := make(chan struct{})
	b.rdb.AddHook(&redisHook{before: func(cmd redis.Cmder) {
		// A timeline rebuild's head with its token: the rebuild then reads PostgreSQL.
		if cmd.Name() == "set" && strings.Contains(fmt.Sprint(cmd.Args()), "timeline:{") {
			if loads.Add(1) <= 3 {
				<-release
			}
		}
	}})
	done := make(chan []int64)
	go func() {
		page, err := b.feeds.Read(ctx, 10, 0, 20)
		if err != nil {
			t.Errorf("read: %v", err)
		}
		done <- ids(page.Posts)
	}()
	require.Eventually(t, func() bool { return loads.Load() == 3 }, 30*time.Second, time.Millisecond,
		"all three rebuilds under way at once")
	close(release)
	require.Equal(t, posts, <-done)
}

// A reader who follows more celebrities than a read merges is served from
// PostgreSQL: the work a read does in Redis stays bounded.
func TestTooManyCelebritiesReadFromPostgreSQL(t *testing.T) {
	t.Parallel()
	b, posts := celebrityBundle(t, 101)
	require.Equal(t, posts[:20], ids(mustRead(t, b, 10)), "warm: rebuilt and cached")
	hook := &redisHook{}
	b.rdb.AddHook(hook)
	require.Equal(t, posts[:20], ids(mustRead(t, b, 10)))
	require.Less(t, hook.commands.Load(), int64(60), "Redis commands for one page")
}

// A second review found four more sequences; each of these failed before
// its fix.

// gatedBundle is a bundle whose feed rebuilds wait after reading
// PostgreSQL, one gate each.
func gatedBundle(t *testing.T, cfg feed.Config, gates ...chan struct{}) (*bundle, *gatedStore) {
	t.Helper()
	if cfg.MaxLen == 0 {
		cfg.MaxLen = 50
	}
	var gs *gatedStore
	b := setupOn(t, cfg, func(db *store.DB) feed.Store {
		gs = &gatedStore{DB: db, maxLen: cfg.MaxLen, entered: make(chan struct{}, len(gates)), gates: gates}
		return gs
	})
	return b, gs
}

// readAsync reads a page of user's feed in the background.
func (b *bundle) readAsync(t *testing.T, user int64) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := b.feeds.Read(context.Background(), user, 0, 20); err != nil {
			t.Errorf("read: %v", err)
		}
	}()
	return done
}

// A fan-out that read its followers before an unfollow pushes into the feed
// while a rebuild that began after the unfollow fills it: the rebuild must
// not keep the post.
func TestStalePushDuringARebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gate := make(chan struct{})
	b, gs := gatedBundle(t, feed.Config{}, gate)
	b.follow(t, 10, 1)
	b.follow(t, 10, 2)
	kept := b.post(t, 2)
	late := b.post(t, 1) // its fan-out read follower 10 before the unfollow
	asOf := b.now(t)
	b.unfollow(t, 10, 1) // the feed does not exist (never read, or lost)
	done := b.readAsync(t, 10)
	<-gs.entered // the rebuild read PostgreSQL, after the unfollow
	_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: late, AuthorID: 1}, []int64{10}, asOf, true))
	require.NoError(t, err)
	close(gate)
	<-done
	require.Equal(t, []int64{kept}, b.feedMembers(t, 10))
	require.Equal(t, []int64{kept}, b.readAll(t, 10, 20))
}

// pauseKey marks the context of the call whose script a test holds.
type pauseKey struct{}

// An unfollow that looked at the feed while a rebuild filled it, and runs its
// script after the rebuild finished with the followee's posts, must not
// leave them there.
func TestUnfollowAcrossARebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gate := make(chan struct{})
	b, gs := gatedBundle(t, feed.Config{}, gate)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.rdb.AddHook(pauseHook{held: held, release: release, once: &once})
	b.follow(t, 10, 1)
	b.follow(t, 10, 2)
	gone := b.post(t, 1)
	kept := b.post(t, 2)
	done := b.readAsync(t, 10)
	<-gs.entered // the rebuild read PostgreSQL, before the unfollow
	_, err := b.db.Unfollow(ctx, 10, 1)
	require.NoError(t, err)
	unfollowed := make(chan error)
	go func() {
		unfollowed <- applyUnfollowState(context.WithValue(ctx, pauseKey{}, true), b.db, b.feeds, 10, 1)
	}()
	<-held // the unfollow looked at the feed (its placeholder) and is about to run its script
	close(gate)
	<-done // the rebuild finished, with the followee's post
	close(release)
	require.NoError(t, <-unfollowed)
	require.NotContains(t, b.feedMembers(t, 10), gone)
	require.Equal(t, []int64{kept}, b.readAll(t, 10, 20))
}

// pauseHook holds the first script call made with pauseKey in its context.
type pauseHook struct {
	held, release chan struct{}
	once          *sync.Once
}

func (h pauseHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h pauseHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && ctx.Value(pauseKey{}) != nil {
			h.once.Do(func() { close(h.held); <-h.release })
		}
		return next(ctx, cmd)
	}
}

func (h pauseHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// backfillGate holds a follow's backfill after it read PostgreSQL.
type backfillGate struct {
	*store.DB
	entered, release chan struct{}
}

func (s *backfillGate) AuthorPostIDsSince(ctx context.Context, author, since int64, limit int) ([]int64, error) {
	ids, err := s.DB.AuthorPostIDsSince(ctx, author, since, limit)
	if ctx.Value(pauseKey{}) != nil {
		s.entered <- struct{}{}
		<-s.release
	}
	return ids, err
}

// A post of the new followee committed after the follow read the backfill,
// and fanned out before the follow merged it, must be in the feed.
func TestPostFannedOutDuringAFollow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var gate *backfillGate
	b := setupOn(t, feed.Config{Backfill: 5}, func(db *store.DB) feed.Store {
		gate = &backfillGate{DB: db, entered: make(chan struct{}), release: make(chan struct{})}
		return gate
	})
	b.follow(t, 10, 1)
	mine := b.post(t, 1)
	older := b.post(t, 2)
	require.Equal(t, []int64{mine}, b.readAll(t, 10, 20), "a whole feed")
	b.follow(t, 10, 2)
	followed := make(chan error)
	go func() {
		_, err := applyFollowState(context.WithValue(ctx, pauseKey{}, true), b.db, b.feeds, 10, 2)
		followed <- err
	}()
	<-gate.entered // the backfill was read
	newer := b.post(t, 2)
	_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: newer, AuthorID: 2}, []int64{10}, b.now(t), true)) // its fan-out sees follower 10
	require.NoError(t, err)
	close(gate.release)
	require.NoError(t, <-followed)
	require.Equal(t, []int64{newer, older, mine}, b.readAll(t, 10, 20))
}

// Pushes into a feed under rebuild must not trim it: a post trimmed then is
// missing above the bound once the rebuild merges its older posts and a
// delete takes a newer one away.
func TestPushesDuringARebuildAreNotTrimmed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gate := make(chan struct{})
	b, gs := gatedBundle(t, feed.Config{MaxLen: 3}, gate)
	b.follow(t, 10, 1)
	old := []int64{b.post(t, 1), b.post(t, 1), b.post(t, 1)}
	done := b.readAsync(t, 10)
	<-gs.entered // the rebuild read the three old posts
	var pushed []int64
	for range 4 {
		id := b.post(t, 1)
		pushed = append(pushed, id)
		_, err := b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{10}, b.now(t), true)
		require.NoError(t, err)
	}
	deleted := pushed[3]
	_, err := b.pg.Exec(ctx, `UPDATE posts SET deleted_at = now() WHERE id = $1`, deleted)
	require.NoError(t, err)
	require.NoError(t, b.feeds.Remove(ctx, []int64{10}, []int64{deleted}))
	close(gate)
	<-done
	want := slices.Concat(old, pushed[:3])
	slices.Reverse(want)
	require.Equal(t, want, b.readAll(t, 10, 2))
}
