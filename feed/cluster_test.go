package feed_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// A replica promoted by a failover, or a restarted node, has no scripts: a
// pipeline of pushes meets NOSCRIPT on that node only. The calls that failed
// are sent again, and every entry written is counted once — resending the
// whole pipeline would report 0 for the calls that had succeeded.
func TestPushCountsEveryEntryWhenOneNodeForgotItsScripts(t *testing.T) {
	testenv.SkipWithoutRedisCluster(t)
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	cluster := rdb.(*redis.ClusterClient)
	f := newFeeds(t, rdb, store.New(testenv.NewPool(t), nil), feed.Config{Prefix: prefix, Cluster: true})

	const author = 1
	followers := seedSpreadReaders(t, f, author)

	n, err := pushCount(f.Push(ctx, domain.Entry{PostID: 11, AuthorID: author}, followers, 0, true))
	require.NoError(t, err)
	require.Equal(t, len(followers), n)

	flushed := false
	require.NoError(t, cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		if flushed {
			return nil
		}
		flushed = true
		return node.ScriptFlush(ctx).Err()
	}))
	n, err = pushCount(f.Push(ctx, domain.Entry{PostID: 12, AuthorID: author}, followers, 0, true))
	require.NoError(t, err)
	require.Equal(t, len(followers), n, "every entry written is counted, once")
}

// seedSpreadReaders makes users 100–159, whose feeds spread over every
// primary of the test cluster, readers of author with an empty feed, and
// returns them.
func seedSpreadReaders(t *testing.T, f *feed.Feeds, author int64) []int64 {
	t.Helper()
	readers := map[int64][]int64{}
	var followers []int64
	for u := int64(100); u < 160; u++ {
		readers[u] = []int64{author}
		followers = append(followers, u)
	}
	require.NoError(t, f.SeedEmpty(context.Background(), readers))
	return followers
}

// byPrimary is a cluster client whose nodes count the script calls they
// ran, and the feeds on it.
type byPrimary struct {
	rdb       *redis.ClusterClient
	prefix    string
	feeds     *feed.Feeds
	calls     *scriptCalls
	primaries int
}

// newByPrimary makes a cluster client whose slot map is reloaded only when a
// redirection says so (a test moves a slot under a stale map), and feeds
// on it with cfg.
func newByPrimary(t *testing.T, cfg feed.Config) *byPrimary {
	t.Helper()
	testenv.SkipWithoutRedisCluster(t)
	_, prefix, _ := testenv.NewUniversalRedis(t) // a prefix whose keys are deleted at the end
	calls := &scriptCalls{}
	rdb := testenv.NewStaleClusterClient(t, calls)
	cfg.Prefix, cfg.Cluster = prefix, true
	b := &byPrimary{rdb: rdb, prefix: prefix, calls: calls,
		feeds: newFeeds(t, rdb, store.New(testenv.NewPool(t), nil), cfg)}
	var mu sync.Mutex // ForEachMaster calls its function side by side
	require.NoError(t, rdb.ForEachMaster(t.Context(), func(context.Context, *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		b.primaries++
		return nil
	}))
	return b
}

// push pushes post by author to readers, as its first delivery, and
// returns the result, with the script calls it made.
func (b *byPrimary) push(t *testing.T, post, author int64, readers []int64, asOf int64) (domain.PushResult, int) {
	t.Helper()
	b.calls.reset()
	res, err := b.feeds.Push(t.Context(), domain.Entry{PostID: post, AuthorID: author}, readers, asOf, true)
	require.NoError(t, err)
	return res, b.calls.count()
}

// requireFeeds checks that each reader's feed holds want, and its head each
// of its newest heads entries once.
func (b *byPrimary) requireFeeds(t *testing.T, readers []int64, want []int64, heads int) {
	t.Helper()
	sets, err := feed.InspectMany(t.Context(), b.rdb, b.prefix, readers)
	require.NoError(t, err)
	for i, u := range readers {
		require.Equal(t, want, sets[i].IDs, "feed of %d", u)
	}
	for i, n := range b.heads(t, readers) {
		require.EqualValues(t, heads, n, "the head of %d's feed holds each entry once", readers[i])
	}
}

// heads returns how many entries the head of each reader's feed holds, as
// stored (reads keep one of each; the head's bytes do not).
func (b *byPrimary) heads(t *testing.T, readers []int64) []int64 {
	t.Helper()
	out := make([]int64, len(readers))
	for i, u := range readers {
		n, err := b.rdb.StrLen(t.Context(), feed.StorageKeys(b.prefix, u)[1]).Result()
		require.NoError(t, err)
		out[i] = (n - 1) / 8
	}
	return out
}

// On a Redis Cluster, a push makes one script call per primary for a page
// of followers, not one per follower: the keys of many slots go to their
// primary as arguments (callKeys in lua/common.lua). A primary refuses such a
// call when a key of its is in a slot being moved away (ASK) or moved since
// the client read the slot map (MOVED); the page runs again set by set,
// routed by each set's keys, and every feed holds the post once — its
// head's bytes say so, as reads keep one of each.
func TestPushByPrimaryFollowsAMovedSlot(t *testing.T) {
	b := newByPrimary(t, feed.Config{})
	ctx := t.Context()
	const author = 1
	followers := seedSpreadReaders(t, b.feeds, author)
	away := []int64{300, 301, 302} // no feed in Redis
	readers := append(slices.Clone(followers), away...)
	const asOf = 1                       // after the seeded feeds' last change: no following hash is asked
	b.push(t, 10, author, readers, asOf) // loads the scripts

	res, calls := b.push(t, 11, author, readers, asOf)
	require.Equal(t, b.primaries, calls, "script calls to push to %d readers on %d primaries", len(readers), b.primaries)
	require.Equal(t, len(followers), res.Added)
	require.ElementsMatch(t, followers, res.Holders)
	require.ElementsMatch(t, away, res.Missing)

	// The reader last in the list whose primary serves others before it:
	// last in its call.
	moved := followers[len(followers)-1]
	key := feed.Key(b.prefix, moved)
	slot, err := b.rdb.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	owner, err := b.rdb.MasterForKey(ctx, key)
	require.NoError(t, err)
	m := testenv.NewSlotMove(t, int(slot), owner.Options().Addr)

	// Half a move: the reader's keys are on another primary, the slot still
	// its old one's, which refuses the call; set by set, the client follows
	// its ASK, and the new primary answers a script whose keys are not all
	// there yet (the tail: there is none) with TRYAGAIN. The page fails, as
	// it did when every call went set by set: its event is retried.
	m.Begin()
	b.calls.reset()
	_, err = b.feeds.Push(ctx, domain.Entry{PostID: 12, AuthorID: author}, readers, asOf, true)
	require.ErrorContains(t, err, "TRYAGAIN")
	require.Positive(t, b.calls.refused(), "no call was refused for a key of slot %d, moving from %s", slot, owner.Options().Addr)

	// The whole move: the old primary answers MOVED, and the client's map
	// is stale. A new post's page is refused on the old primary, then runs
	// set by set; the retry of post 12 (not first) adds it where it is
	// missing, and nowhere twice.
	m.Finish()
	res, _ = b.push(t, 13, author, readers, asOf)
	require.Positive(t, b.calls.refused(), "no call was refused for a key of slot %d, moved from %s", slot, owner.Options().Addr)
	require.ElementsMatch(t, followers, res.Holders)
	require.ElementsMatch(t, away, res.Missing)
	t.Logf("slot %d moved from %s: %d script calls refused, then every feed took post 13 set by set",
		slot, owner.Options().Addr, b.calls.refused())
	res, err = b.feeds.Push(ctx, domain.Entry{PostID: 12, AuthorID: author}, readers, asOf, false)
	require.NoError(t, err)
	require.ElementsMatch(t, followers, res.Holders)
	b.requireFeeds(t, followers, []int64{10, 11, 12, 13}, 4)
}

// The push's other steps run by primary too: pushScript, for the feeds
// whose following hash decides (a page read before their last change:
// here every feed, asOf 0), which leaves out a reader who does not follow
// the author, and spillScript, for the heads a push filled.
func TestPushByPrimaryChecksFollowingAndSpills(t *testing.T) {
	const maxLen = 24 // heads spill at 4 entries
	b := newByPrimary(t, feed.Config{MaxLen: maxLen})
	const author, other = 1, 2
	followers := seedSpreadReaders(t, b.feeds, author)
	strangers := map[int64][]int64{}
	var notFollowing []int64
	for u := int64(200); u < 230; u++ {
		strangers[u] = []int64{other}
		notFollowing = append(notFollowing, u)
	}
	require.NoError(t, b.feeds.SeedEmpty(t.Context(), strangers))
	readers := append(slices.Clone(followers), notFollowing...)
	b.push(t, 10, author, followers, 1) // loads the scripts

	// A page read after the feeds' last change (asOf 1): appendScript, and
	// spillScript when heads filled, each one call per primary.
	var calls int
	posts := []int64{10}
	for post := int64(11); post <= 40; post++ {
		res, n := b.push(t, post, author, followers, 1)
		calls += n
		posts = append(posts, post)
		require.ElementsMatch(t, followers, res.Holders, "post %d", post)
	}
	require.Zero(t, calls%b.primaries, "%d calls on %d primaries", calls, b.primaries)
	require.Greater(t, calls, 30*b.primaries, "no spill ran")
	require.LessOrEqual(t, calls, 2*30*b.primaries)

	// A page read before (asOf 0): every feed asks its reader's following
	// hash, in pushScript, after appendScript left them all: two calls per
	// primary; those who follow someone else take nothing.
	for post := int64(41); post <= 45; post++ {
		res, n := b.push(t, post, author, readers, 0)
		posts = append(posts, post)
		require.Equal(t, 2*b.primaries, n, "post %d", post)
		require.ElementsMatch(t, followers, res.Holders, "post %d", post)
		require.Empty(t, res.Missing, "post %d", post)
	}

	sets, err := feed.InspectMany(t.Context(), b.rdb, b.prefix, readers)
	require.NoError(t, err)
	for i, u := range readers {
		if i >= len(followers) {
			require.Empty(t, sets[i].IDs, "reader %d follows someone else", u)
			continue
		}
		ids := sets[i].IDs
		require.GreaterOrEqual(t, len(ids), maxLen, "feed of %d", u)
		require.Equal(t, posts[len(posts)-len(ids):], ids, "feed of %d: the newest posts, each once", u)
	}
	for i, n := range b.heads(t, followers) {
		require.LessOrEqual(t, n, int64(4), "the head of %d's feed spilled", followers[i])
	}
}

// scriptCalls is a hook that counts the script calls its client's nodes
// ran (a call a node did not know the script of, NOSCRIPT, is counted when
// sent again), and those a node refused for a key it does not serve.
type scriptCalls struct {
	mu              sync.Mutex
	calls, nonLocal int
}

func (s *scriptCalls) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls, s.nonLocal = 0, 0
}

func (s *scriptCalls) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *scriptCalls) refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nonLocal
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range cmds {
			if name := c.Name(); name != "evalsha" && name != "eval" {
				continue
			}
			if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				continue // never ran: sent again with its body, counted then
			}
			s.calls++
			if c.Err() != nil && strings.Contains(c.Err().Error(), "non local key") {
				s.nonLocal++
			}
		}
		return err
	}
}

// BenchmarkScriptOnAPrimary is what bounds a push's Redis CPU on a cluster
// (docs/PERFORMANCE.md, "Fan-out at the limit, second steps"): one script
// call on the feeds of 333 users that one primary serves, keys passed as
// arguments, against the same call on one Redis. Inside a script on a
// cluster node every command is checked against the node's slots, and each
// feed's meta needs an MGET of its own, since no command may span slots.
// (make bench-cluster measures the whole push; this isolates the script.)
func BenchmarkScriptOnAPrimary(b *testing.B) {
	testenv.SkipWithoutRedisCluster(b)
	const users = 333
	appendOnly := redis.NewScript(`local n = #ARGV / 2
for j = 1, n do redis.call('APPEND', ARGV[n + j], 'xxxxxxxx') end
return n`)
	metaAndAppend := redis.NewScript(`local n = #ARGV / 2
for j = 1, n do
  local meta = redis.call('MGET', ARGV[j])[1]
  redis.call('APPEND', ARGV[n + j], 'xxxxxxxx')
end
return n`)
	metasAtOnce := redis.NewScript(`local n = #ARGV / 2
local metas = redis.call('MGET', unpack(ARGV, 1, n))
for j = 1, n do redis.call('APPEND', ARGV[n + j], 'xxxxxxxx') end
return n`)

	single, singlePrefix := testenv.NewRedis(b)
	rdb, clusterPrefix, _ := testenv.NewUniversalRedis(b)
	cluster := rdb.(*redis.ClusterClient)
	ctx := b.Context()
	// users whose keys the first key's primary serves
	var primary *redis.Client
	var keys []string
	for u := 0; len(keys) < users; u++ {
		k := feed.Key(clusterPrefix, int64(u))
		p, err := cluster.MasterForKey(ctx, k)
		if err != nil {
			b.Fatal(err)
		}
		if primary == nil {
			primary = p
		}
		if p == primary {
			keys = append(keys, k)
		}
	}
	args := func(prefix string) []any {
		a := make([]any, 0, 2*users)
		for _, k := range keys {
			a = append(a, prefix+strings.TrimPrefix(k, clusterPrefix))
		}
		for _, k := range keys {
			a = append(a, prefix+strings.TrimPrefix(k, clusterPrefix)+":head")
		}
		return a
	}
	for _, s := range []struct {
		name   string
		script *redis.Script
		onOne  bool // one Redis only: an MGET of many slots
	}{{"AppendOnly", appendOnly, false}, {"MetaAndAppend", metaAndAppend, false}, {"MetasInOneMGET", metasAtOnce, true}} {
		for _, on := range []struct {
			name   string
			rdb    redis.Scripter
			prefix string
		}{{"OneRedis", single, singlePrefix}, {"ClusterPrimary", primary, clusterPrefix}} {
			if s.onOne && on.name != "OneRedis" {
				continue
			}
			b.Run(s.name+"/"+on.name, func(b *testing.B) {
				a := args(on.prefix) // "…feed:{id}" and "…feed:{id}:head": one slot a user
				for b.Loop() {
					if err := s.script.Run(ctx, on.rdb, nil, a...).Err(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*users)/1000, "µs/feed")
			})
		}
	}
}
