package store_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// benchSetup returns a store on a database of the benchmark's own.
func benchSetup(b *testing.B) (*store.DB, *pgxpool.Pool) {
	b.Helper()
	pool := testenv.NewPool(b)
	return store.New(pool, nil), pool
}

// benchExec runs SQL that arranges a benchmark's data.
func benchExec(b *testing.B, pool *pgxpool.Pool, sql string, args ...any) {
	b.Helper()
	if _, err := pool.Exec(b.Context(), sql, args...); err != nil {
		b.Fatalf("%s: %v", sql, err)
	}
}

// claimBatch is the dispatcher's batch size.
const claimBatch = 500

// BenchmarkClaim measures one dispatcher pass over the outbox, without the
// queue: claim a batch of due rows, then record them published.
func BenchmarkClaim(b *testing.B) {
	db, pool := benchSetup(b)
	ctx := b.Context()
	benchExec(b, pool, `
INSERT INTO outbox (event_type, payload)
SELECT 'post.created', jsonb_build_object('post_id', g, 'author_id', 1 + g % 1000)
FROM generate_series(1, $1) g
ORDER BY g`, b.N*claimBatch)
	// Steady state has statistics (autovacuum); without them the plan may differ.
	benchExec(b, pool, "ANALYZE outbox")
	// The tickets are stream entry ids; what they say does not matter here.
	tickets := make([]string, claimBatch)
	for i := range tickets {
		tickets[i] = "1700000000000-" + strconv.Itoa(i)
	}
	ids := make([]int64, claimBatch)
	// Prepare both statements on the connection without touching a row.
	if _, err := db.Claim(ctx, 0, time.Minute); err != nil {
		b.Fatal(err)
	}
	if err := db.MarkPublished(ctx, nil, nil, time.Hour); err != nil {
		b.Fatal(err)
	}

	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		events, err := db.Claim(ctx, claimBatch, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if len(events) != claimBatch {
			b.Fatalf("claimed %d rows, want %d", len(events), claimBatch)
		}
		for i, e := range events {
			ids[i] = e.ID
		}
		if err := db.MarkPublished(ctx, ids, tickets, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*claimBatch)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkFollowerIDs measures fan-out paging: one keyset page of follower
// ids of an author with many followers per iteration, wrapping around at
// the end.
func BenchmarkFollowerIDs(b *testing.B) {
	const (
		author    = int64(1)
		followers = 100_000
		page      = 1000
	)
	db, pool := benchSetup(b)
	ctx := b.Context()
	first, last := author+1, author+followers
	n, err := pool.CopyFrom(ctx, pgx.Identifier{"follows"}, []string{"follower_id", "followee_id"},
		pgx.CopyFromFunc(func() func() ([]any, error) {
			next := first
			return func() ([]any, error) {
				if next > last {
					return nil, nil
				}
				row := []any{next, author}
				next++
				return row, nil
			}
		}()))
	if err != nil || n != followers {
		b.Fatalf("copy follows: %d rows, %v", n, err)
	}
	// A settled table, as autovacuum leaves it: statistics, and a visibility
	// map that lets the page be an index-only scan of the primary key.
	benchExec(b, pool, "VACUUM ANALYZE follows")
	if _, err := db.FollowerIDs(ctx, author, last, page); err != nil { // prepares the statement
		b.Fatal(err)
	}

	b.ReportAllocs()
	b.ResetTimer()
	after := int64(0)
	for range b.N {
		ids, err := db.FollowerIDs(ctx, author, after, page)
		if err != nil {
			b.Fatal(err)
		}
		if len(ids) != page {
			b.Fatalf("page after %d has %d ids, want %d", after, len(ids), page)
		}
		after = ids[len(ids)-1]
		if after == last {
			after = 0
		}
	}
	b.ReportMetric(float64(b.N*page)/b.Elapsed().Seconds(), "followers/s")
}

// BenchmarkCreatePost measures the write path of a post: the post and its
// outbox row in one statement, from as many goroutines as GOMAXPROCS.
func BenchmarkCreatePost(b *testing.B) {
	db, pool := benchSetup(b)
	ctx := b.Context()
	body := "a post of a typical length, with a link https://example.com/some/article and a few words more"
	var author atomic.Int64
	// Dial the pool's connections and prepare the statement on them, so that
	// a short run does not time connection setup.
	var wg sync.WaitGroup
	for range pool.Config().MaxConns {
		wg.Go(func() {
			if _, _, err := db.CreatePost(ctx, 1_000_000, body, ""); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()

	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		me := author.Add(1)
		for pb.Next() {
			if _, _, err := db.CreatePost(ctx, me, body, ""); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "posts/s")
}
