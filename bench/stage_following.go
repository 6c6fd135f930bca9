package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/newsfeed/newsfeed/feed"
)

// The scenario of readers who follow many: manyReaders readers, each
// following the same manyAuthors authors (over fanout.following_threshold's
// default of 2,000), who have two posts each. Redis keeps no feed for these
// readers, and their reads come from PostgreSQL (docs/DESIGN.md, "Readers
// who follow many").
const (
	manyAuthorBase = 7_000_000 // authors 7000000..
	manyAuthors    = 10_000
	manyPosts      = 2         // posts per author
	manyReaderBase = 7_100_000 // readers 7100000..
	manyReaders    = 16
)

// followingMany: GET /v1/feed of readers who follow 10,000 authors, against
// the read stage's plain reads in the same runs (whose feeds Redis keeps),
// with what each read costs PostgreSQL. The fan-out's side of the trade is
// the inactive-followers stage's: to a push, a reader without a feed costs
// a key lookup and no entry.
func (r *runner) followingMany(ctx context.Context) error {
	readers, newest, err := r.seedFollowingMany(ctx)
	if err != nil {
		return err
	}
	plainReaders, err := r.plainReaders(ctx)
	if err != nil {
		return err
	}
	// Their first page is the newest 20 posts, and Redis keeps no feed
	// for them: else the stage would not measure what it names.
	for _, u := range readers {
		got, _, err := r.readFeedPage(ctx, u, "")
		if err != nil {
			return err
		}
		if !slices.Equal(got, newest) {
			return fmt.Errorf("reader %d who follows %d: first page %v, want %v", u, manyAuthors, got, newest)
		}
		stored, err := feed.Inspect(ctx, r.rdb, r.h.Prefix, u)
		if err != nil {
			return err
		}
		if stored.Exists {
			return fmt.Errorf("reader %d follows %d and has a feed in Redis: is fanout.following_threshold under %d?",
				u, manyAuthors, manyAuthors)
		}
	}
	var plain, many readSide
	var ratios []float64
	for run := range r.opts.Runs {
		if err := r.measureReads(ctx, &plain, plainReaders, r.readFeed); err != nil {
			return err
		}
		if err := r.measureReads(ctx, &many, readers, r.readFeed); err != nil {
			return err
		}
		o, p := many.perSec[run], plain.perSec[run]
		ratios = append(ratios, ratio(o, p))
		fmt.Fprintf(r.progress, "  run %d: following %d: %.0f reads/s (PostgreSQL %.0f µs CPU/read), plain reads %.0f reads/s\n",
			run+1, manyAuthors, o, many.costs[run].PostgresCPUPerUnit, p)
	}
	lat, plainLat := percentiles(many.lat), percentiles(plain.lat)
	r.report.add(Stage{
		Name: "reads of readers who follow 10,000 / plain reads", Unit: "reads/s",
		Ours: median(many.perSec), Limit: median(plain.perSec), Ratio: median(ratios),
		Spread: spreadOf(many.perSec, plain.perSec, ratios), Latency: lat,
		Note: fmt.Sprintf("the read's cost of not fanning out to them: each read is a PostgreSQL query (plain reads p50 %.1f, p99 %.1f ms); "+
			"to the fan-out they cost what an inactive follower does", plainLat.P50, plainLat.P99),
		Redis: r.redisLabel, Cost: medianCost(many.costs), LimitCost: medianCost(plain.costs),
	})
	return nil
}

// seedFollowingMany writes the scenario's posts and follows, once, and
// returns its readers and the ids their first page must show.
func (r *runner) seedFollowingMany(ctx context.Context) (readers, newest []int64, err error) {
	n := manyAuthors * manyPosts
	first, err := r.reservePostIDs(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	posts := make([]seedPost, n)
	for i := range posts {
		posts[i] = seedPost{id: first + int64(i), author: int64(manyAuthorBase + i%manyAuthors), body: "a post of one of 10,000"}
	}
	if err := r.copyPosts(ctx, posts, "seed following"); err != nil {
		return nil, nil, err
	}
	follows := make([][]any, 0, manyReaders*manyAuthors)
	for i := range manyReaders {
		readers = append(readers, int64(manyReaderBase+i))
		for a := range manyAuthors {
			follows = append(follows, []any{int64(manyAuthorBase + a), int64(manyReaderBase + i)})
		}
	}
	if _, err := r.pool.CopyFrom(ctx, pgx.Identifier{"follows"}, []string{"followee_id", "follower_id"}, pgx.CopyFromRows(follows)); err != nil {
		return nil, nil, fmt.Errorf("seed following many: %w", err)
	}
	if _, err := r.pool.Exec(ctx, `INSERT INTO follower_counts (user_id, followers)
		SELECT g, $3::bigint FROM generate_series($1::bigint, $2::bigint) g
		ON CONFLICT (user_id) DO UPDATE SET followers = follower_counts.followers + EXCLUDED.followers`,
		manyAuthorBase, manyAuthorBase+manyAuthors-1, manyReaders); err != nil {
		return nil, nil, fmt.Errorf("seed following many: follower counts: %w", err)
	}
	if _, err := r.pool.Exec(ctx, `ANALYZE follows, posts`); err != nil {
		return nil, nil, err
	}
	for i := range 20 {
		newest = append(newest, first+int64(n-1-i))
	}
	return readers, newest, nil
}
