package feed_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// pushPage is a fan-out page: the followers one Push writes to.
const pushPage = 1000

// seededAsOf is the "as of" of seeded feeds: a push whose followers were
// read after it asks no following hash.
const seededAsOf = 0

// benchAuthor writes the posts that the push benchmarks fan out.
const benchAuthor = 1_000_000

// pushSetup creates the complete (empty) feeds of a page of followers and
// returns their ids.
func pushSetup(b testing.TB, rdb *redis.Client, prefix string) []int64 {
	b.Helper()
	ctx := b.Context()
	followers := make([]int64, pushPage)
	readers := make(map[int64][]int64, pushPage)
	for i := range followers {
		followers[i] = int64(i + 1)
		readers[followers[i]] = []int64{benchAuthor}
	}
	if err := newFeeds(b, rdb, nil, feed.Config{Prefix: prefix}).SeedEmpty(ctx, readers); err != nil {
		b.Fatalf("create feeds: %v", err)
	}
	return followers
}

// BenchmarkPush measures the fan-out write: one post pushed to a page of
// followers whose feeds exist, in one pipeline of script calls.
func BenchmarkPush(b *testing.B) {
	rdb, prefix := testenv.NewRedis(b)
	feeds := newFeeds(b, rdb, nil, feed.Config{Prefix: prefix})
	followers := pushSetup(b, rdb, prefix)
	ctx := b.Context()

	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		n, err := pushCount(feeds.Push(ctx, domain.Entry{PostID: int64(i + 1), AuthorID: benchAuthor}, followers, seededAsOf+1, true))
		if err != nil {
			b.Fatal(err)
		}
		if n != len(followers) {
			b.Fatalf("push added %d entries, want %d", n, len(followers))
		}
	}
	b.ReportMetric(float64(b.N*pushPage)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkPushRawZADD is the floor under BenchmarkPush: the same pipeline of
// plain ZADDs, with no existence check, no trim and no script.
func BenchmarkPushRawZADD(b *testing.B) {
	rdb, prefix := testenv.NewRedis(b)
	followers := pushSetup(b, rdb, prefix)
	keys := make([]string, len(followers))
	for i, u := range followers {
		keys[i] = prefix + "raw:{" + strconv.FormatInt(u, 10) + "}"
	}
	ctx := b.Context()

	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := int64(i + 1)
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.ZAdd(ctx, k, redis.Z{Score: float64(id), Member: id})
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*pushPage)/b.Elapsed().Seconds(), "entries/s")
}

// benchStore is the real store with its calls counted: a read served by
// Redis makes none.
type benchStore struct {
	*store.DB
	calls atomic.Int64
}

func (s *benchStore) PostsByID(ctx context.Context, ids []int64) ([]domain.Post, error) {
	s.calls.Add(1)
	return s.DB.PostsByID(ctx, ids)
}

func (s *benchStore) FolloweePosts(ctx context.Context, follower, before int64, limit int) ([]domain.Post, error) {
	s.calls.Add(1)
	return s.DB.FolloweePosts(ctx, follower, before, limit)
}

func (s *benchStore) FeedEntries(ctx context.Context, user int64, limit int) ([]domain.Post, error) {
	s.calls.Add(1)
	return s.DB.FeedEntries(ctx, user, limit)
}

// readBench is a reader whose feed is built and whose posts are cached.
type readBench struct {
	rdb    *redis.Client
	prefix string
	store  *benchStore
	feeds  *feed.Feeds
	reader int64
}

const (
	readAuthors        = 10
	readPostsPerAuthor = 200
	readPage           = 20
)

// readSetup makes a reader follow readAuthors authors with readPostsPerAuthor
// posts each, and reads the first page once, which builds the feed and
// caches its posts.
func readSetup(b *testing.B) *readBench {
	b.Helper()
	ctx := b.Context()
	pool := testenv.NewPool(b)
	rdb, prefix := testenv.NewRedis(b)
	st := &benchStore{DB: store.New(pool, nil)}
	rb := &readBench{rdb: rdb, prefix: prefix, store: st, feeds: newFeeds(b, rdb, st, feed.Config{Prefix: prefix}), reader: 1000}
	// Written directly (no outbox rows): the posts are the data, not the subject.
	_, err := pool.Exec(ctx, `
INSERT INTO posts (author_id, body)
SELECT 1 + g % $1, 'post ' || g || ': a body of a typical length, with a link https://example.com/article/' || g
FROM generate_series(1, $2) g ORDER BY g`, readAuthors, readAuthors*readPostsPerAuthor)
	if err != nil {
		b.Fatalf("create posts: %v", err)
	}
	for a := int64(1); a <= readAuthors; a++ {
		if _, err := st.Follow(ctx, rb.reader, a); err != nil {
			b.Fatalf("follow: %v", err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE posts, follows"); err != nil {
		b.Fatalf("analyze: %v", err)
	}
	page, err := rb.feeds.Read(ctx, rb.reader, 0, readPage)
	if err != nil {
		b.Fatalf("first read: %v", err)
	}
	if len(page.Posts) != readPage || page.Next == 0 {
		b.Fatalf("first read: %d posts, next %d", len(page.Posts), page.Next)
	}
	rb.store.calls.Store(0)
	return rb
}

// BenchmarkRead measures a home feed read served by Redis: the ids of the
// first page, then the posts from the post cache.
func BenchmarkRead(b *testing.B) {
	rb := readSetup(b)
	ctx := b.Context()

	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			page, err := rb.feeds.Read(ctx, rb.reader, 0, readPage)
			if err != nil {
				b.Error(err)
				return
			}
			if len(page.Posts) != readPage {
				b.Errorf("read %d posts, want %d", len(page.Posts), readPage)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
	if n := rb.store.calls.Load(); n != 0 {
		b.Fatalf("reads went to PostgreSQL %d times; the benchmark is meant to measure Redis", n)
	}
}

// BenchmarkHydrateLimit is the floor under BenchmarkRead, done by hand: one
// ZREVRANGEBYSCORE for readPage+1 ids of a plain sorted set holding the
// reader's feed, one pipeline of GETs of their posts, and decoding them.
func BenchmarkHydrateLimit(b *testing.B) {
	rb := readSetup(b)
	ctx := b.Context()
	key := rb.prefix + "rawfeed"
	stored, err := feed.Inspect(ctx, rb.rdb, rb.prefix, rb.reader)
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range stored.IDs {
		rb.rdb.ZAdd(ctx, key, redis.Z{Score: float64(id), Member: id})
	}

	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ids, err := rb.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
				Key: key, ByScore: true, Rev: true, Start: "+inf", Stop: "(0", Count: readPage + 1,
			}).Result()
			if err != nil {
				b.Error(err)
				return
			}
			cmds := make([]*redis.StringCmd, len(ids))
			_, err = rb.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, id := range ids {
					cmds[i] = p.Get(ctx, rb.prefix+"post:"+id)
				}
				return nil
			})
			if err != nil {
				b.Error(err)
				return
			}
			posts := make([]domain.Post, len(cmds))
			for i, c := range cmds {
				raw, err := c.Bytes()
				if err == nil {
					err = json.Unmarshal(raw, &posts[i])
				}
				if err != nil {
					b.Errorf("post %s: %v", ids[i], err)
					return
				}
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
}
