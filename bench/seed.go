package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/schollz/progressbar/v3"

	"github.com/newsfeed/newsfeed/feed"
)

// The synthetic graph. Every author's followers are users FollowerBase,
// FollowerBase+1, …: the sets overlap, so a follower's feed gets posts from
// several authors, as real feeds do.
const (
	FollowerBase = 1_000_000

	author100  = 1 // latency stage: 100 followers
	author1k   = 2 // latency stage: 1,000 followers
	author10k  = 3 // latency stage: 10,000 followers
	authorBig  = 4 // big fan-out stage
	authorWide = 5 // chunked fan-out stage: ChunkFollowers followers
	authorAway = 6 // inactive followers stage: awayFollowers followers, half of them away
	// repostedAuthor's posts are what the repost fan-out reposts: nobody
	// follows them, so each repost is a new entry in every feed.
	repostedAuthor = 7
	fanoutBase     = 10 // fan-out stage: authors 10..19 with 1,000 followers
	fanoutN        = 10
	quietBase      = 100 // post-creation stage: authors without followers
	quietN         = 100
	readBase       = 200 // read stage: authors 200..209 with seeded posts
	readN          = 10
	readerBase     = 500_000 // read stage: readers 500000.. follow the 10 read authors

	awayBase      = 5_000_000 // inactive followers stage: their own followers
	awayFollowers = 20_000
)

type graph struct {
	edges map[int64]int // author → followers
}

func newGraph(big, wide int) graph {
	g := graph{edges: map[int64]int{author100: 100, author1k: 1000, author10k: 10_000, authorBig: big, authorWide: wide}}
	for i := range fanoutN {
		g.edges[int64(fanoutBase+i)] = 1000
	}
	return g
}

func (g graph) maxFollowers() int {
	m := 0
	for _, f := range g.edges {
		m = max(m, f)
	}
	return m
}

// copySource feeds COPY from a generator and moves a progress bar.
type copySource struct {
	rows func(i int) []any
	n, i int
	bar  *progressbar.ProgressBar
	row  []any
}

func (s *copySource) Next() bool {
	if s.i >= s.n {
		return false
	}
	s.row = s.rows(s.i)
	s.i++
	if s.i%10_000 == 0 || s.i == s.n {
		_ = s.bar.Set(s.i)
	}
	return true
}
func (s *copySource) Values() ([]any, error) { return s.row, nil }
func (s *copySource) Err() error             { return nil }

func newBar(w io.Writer, n int, what string) *progressbar.ProgressBar {
	return progressbar.NewOptions(n,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100_000_000),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
}

// seed writes the graph, the read stage's authors, readers and posts with
// COPY, straight into PostgreSQL, and marks every follower's feed as built
// in Redis (as after their first read), so that fan-out writes them.
func (r *runner) seed(ctx context.Context) error {
	g := newGraph(r.opts.BigFollowers, r.opts.ChunkFollowers)
	type edge struct{ author, follower int64 }
	var edges []edge
	for a, n := range g.edges {
		for i := range n {
			edges = append(edges, edge{a, int64(FollowerBase + i)})
		}
	}
	for i := range awayFollowers {
		edges = append(edges, edge{authorAway, int64(awayBase + i)})
	}
	for reader := range r.opts.Readers {
		for a := range readN {
			edges = append(edges, edge{int64(readBase + a), int64(readerBase + reader)})
		}
	}
	bar := newBar(r.progress, len(edges), "seed follows  ")
	_, err := r.pool.CopyFrom(ctx, pgx.Identifier{"follows"}, []string{"followee_id", "follower_id"},
		&copySource{n: len(edges), bar: bar, rows: func(i int) []any { return []any{edges[i].author, edges[i].follower} }})
	if err != nil {
		return fmt.Errorf("seed follows: %w", err)
	}
	if _, err := r.pool.Exec(ctx, `INSERT INTO follower_counts (user_id, followers)
		SELECT followee_id, count(*) FROM follows GROUP BY followee_id
		ON CONFLICT (user_id) DO UPDATE SET followers = EXCLUDED.followers`); err != nil {
		return fmt.Errorf("seed follower counts: %w", err)
	}
	if err := r.settleFollows(ctx); err != nil {
		return err
	}

	// Posts of the read stage's authors, old enough to be history: no outbox rows.
	const perAuthor = 200
	bar = newBar(r.progress, readN*perAuthor, "seed posts    ")
	_, err = r.pool.CopyFrom(ctx, pgx.Identifier{"posts"}, []string{"author_id", "body"},
		&copySource{n: readN * perAuthor, bar: bar, rows: func(i int) []any {
			return []any{int64(readBase + i%readN), "a post to read, number " + strconv.Itoa(i)}
		}})
	if err != nil {
		return fmt.Errorf("seed posts: %w", err)
	}

	// Feeds exist for every follower (they have read before), but for the
	// odd half of authorAway's, who have been away longer than
	// feed.active_days: their feeds expired.
	users := make([]int64, 0, g.maxFollowers()+awayFollowers/2)
	for i := range g.maxFollowers() {
		users = append(users, int64(FollowerBase+i))
	}
	for i := 0; i < awayFollowers; i += 2 {
		users = append(users, int64(awayBase+i))
	}
	return r.seedFeeds(ctx, users)
}

// seeder writes feeds the way the feed package stores them, for the feed
// settings the system runs with (the prefix and feed.max_len).
func (r *runner) seeder() *feed.Feeds {
	seeder, err := feed.New(r.rdb, nil, feed.Config{Prefix: r.h.Prefix, MaxLen: r.opts.MaxLen})
	if err != nil {
		panic(err) // setDefaults made MaxLen, the one field set here that could be out of range, positive
	}
	return seeder
}

// seedFeeds makes complete, whole (empty) feeds with their following hashes
// for users, as a first read leaves them.
func (r *runner) seedFeeds(ctx context.Context, users []int64) error {
	seeder := r.seeder()
	bar := newBar(r.progress, len(users), "build feeds   ")
	for start := 0; start < len(users); start += 5000 {
		readers, err := r.db.FolloweesOf(ctx, users[start:min(start+5000, len(users))])
		if err == nil {
			err = seeder.SeedEmpty(ctx, readers)
		}
		if err != nil {
			return fmt.Errorf("build feeds: %w", err)
		}
		_ = bar.Set(min(start+5000, len(users)))
	}
	return nil
}

// The ids of the posts that fill full feeds (SeedFull) are not real posts:
// they are taken from the posts' id sequence, which is moved past them, so
// that every post created afterwards is newer. They are spread as a real
// reader's feed is, not consecutive (an encoding that stores the gaps
// between ids would be flattered by consecutive ones): a reader who follows
// 200 of a million users who post alike sees one post in 5,000, and a
// system with a million users has about 10⁹ posts after a few years.
const (
	fullFeedFirstID = 1_000_000_000
	fullFeedIDGap   = 5000
)

// spreadIDs are n ids from first, gap apart, oldest first.
func spreadIDs(first, gap int64, n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = first + int64(i)*gap
	}
	return ids
}

// reserveIDs takes n post ids for full feeds out of the posts' id sequence
// (spreadIDs from fullFeedFirstID or the sequence's next value, whichever
// is higher) and moves the sequence past them: no post has them, and every
// post created afterwards has a higher id.
func (r *runner) reserveIDs(ctx context.Context, n int) ([]int64, error) {
	if n <= 0 {
		return nil, nil
	}
	var next int64
	if err := r.pool.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('posts', 'id'))`).Scan(&next); err != nil {
		return nil, fmt.Errorf("reserve post ids: %w", err)
	}
	ids := spreadIDs(max(next, fullFeedFirstID), fullFeedIDGap, n)
	if _, err := r.pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('posts', 'id'), $1)`, ids[n-1]); err != nil {
		return nil, fmt.Errorf("reserve post ids: %w", err)
	}
	return ids, nil
}

// settleFollows leaves the follows table as autovacuum leaves a table that
// has settled: its visibility map set, so that a page of followers is read
// from the index alone (an index-only scan of a freshly copied table visits
// every row's heap page too: 0.33 µs a follower instead of 0.16 here). A
// VACUUM cannot set it while any snapshot older than the copy lives — a
// replica's hot_standby_feedback, behind by its apply delay, holds one —
// so it vacuums until every page is all-visible, for up to 30 s.
func (r *runner) settleFollows(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := r.pool.Exec(ctx, `VACUUM (ANALYZE) follows`); err != nil {
			return fmt.Errorf("seed follows: vacuum: %w", err)
		}
		var visible, pages int64
		if err := r.pool.QueryRow(ctx, `SELECT relallvisible, relpages FROM pg_class WHERE oid = 'follows'::regclass`).
			Scan(&visible, &pages); err != nil {
			return fmt.Errorf("seed follows: visibility: %w", err)
		}
		if visible >= pages {
			return nil
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(r.progress, "  follows: %d of %d pages all-visible after 30 s (an old snapshot, a replica's?): "+
				"pages of followers visit the heap\n", visible, pages)
			return nil
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}
