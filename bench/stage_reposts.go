package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// repostRuns measures the repost fan-out inside the fan-out stage's runs:
// in each, after the post fan-out, FanoutPosts reposts by the same authors
// (fanoutBase…) into the same followers' feeds, emptied again before. Each
// reposts its own post of repostedAuthor, whom no follower follows: every
// repost is a new entry in every feed, as every post is, so the two write
// the same number of entries.
type repostRuns struct {
	r         *runner
	originals []int64 // FanoutPosts a run, Runs runs
	// ours and posts are each run's entries/s of the reposts and of the
	// run's post fan-out; cpu and postCPU their Redis CPU per entry.
	ours, posts, ratios     []float64
	cpu, postCPU, cpuRatios []float64
	costs, postCosts        []*Cost
}

func (r *runner) newRepostRuns(ctx context.Context) (*repostRuns, error) {
	originals, err := r.seedOriginals(ctx, r.opts.FanoutPosts*r.opts.Runs)
	if err != nil {
		return nil, err
	}
	return &repostRuns{r: r, originals: originals}, nil
}

// run fans out run's reposts into the followers' feeds, emptied by the
// caller, and keeps the figures beside the run's post fan-out (posts
// entries/s, postCost).
func (rp *repostRuns) run(ctx context.Context, run int, posts float64, postCost *Cost) error {
	r := rp.r
	n := r.opts.FanoutPosts
	originals := rp.originals[run*n : (run+1)*n]
	var o float64
	cost, err := r.measure(ctx, "entry", func() (int64, error) {
		var err error
		o, err = r.fanOutEach(ctx, n, func(ctx context.Context, i int64) error {
			return r.repost(ctx, fanoutBase+i%fanoutN, originals[i])
		})
		return int64(n * fanoutFollowers), err
	})
	if err != nil {
		return fmt.Errorf("repost fan-out: %w", err)
	}
	c, pc := cost.Redis.CPUPerUnit, postCost.Redis.CPUPerUnit
	rp.ours, rp.posts, rp.ratios = append(rp.ours, o), append(rp.posts, posts), append(rp.ratios, ratio(o, posts))
	rp.cpu, rp.postCPU, rp.cpuRatios = append(rp.cpu, c), append(rp.postCPU, pc), append(rp.cpuRatios, ratio(c, pc))
	rp.costs, rp.postCosts = append(rp.costs, cost), append(rp.postCosts, postCost)
	fmt.Fprintf(r.progress, "  run %d: repost fan-out %.0f entries/s (Redis %.2f µs CPU/entry), %.2f of the posts'\n",
		run+1, o, c, ratio(o, posts))
	return nil
}

// report adds the repost fan-out's lines: its throughput and its Redis CPU
// per entry, each against the post fan-out's in the same runs.
func (rp *repostRuns) report() {
	r := rp.r
	r.report.add(Stage{
		Name: repostFanoutStage + r.nameSuffix, Unit: "entries/s", Ours: median(rp.ours), Limit: median(rp.posts),
		Ratio: median(rp.ratios), Spread: spreadOf(rp.ours, rp.posts, rp.ratios),
		Note: fmt.Sprintf("%d reposts × %s followers into fresh feeds (emptied before each run), by the fan-out stage's "+
			"authors, of posts by an author the followers do not follow (each a new entry), POST /v1/posts/{id}/reposts → "+
			"outbox → dispatcher → stream → workers → Redis, vs the fan-out stage's %d posts in the same runs (limit: "+
			"that post fan-out; cost table: limit = the posts')", r.opts.FanoutPosts, humanInt(fanoutFollowers), r.opts.FanoutPosts),
		Redis: r.redisLabel, Cost: medianCost(rp.costs), LimitCost: medianCost(rp.postCosts),
	})
	r.report.add(Stage{
		Name: "Redis CPU per entry, repost fan-out" + r.nameSuffix, Unit: "µs/entry", Ours: median(rp.cpu),
		Limit: median(rp.postCPU), Ratio: median(rp.cpuRatios), Spread: spreadOf(rp.cpu, rp.postCPU, rp.cpuRatios),
		Note:  "used_cpu_sys + used_cpu_user of every primary (INFO cpu) over the run, per entry, reposts vs the posts' in the same run",
		Redis: r.redisLabel,
	})
}

// seedOriginals writes n posts of repostedAuthor straight into PostgreSQL
// (history: no outbox rows, nobody's feed) and returns their ids, oldest
// first.
func (r *runner) seedOriginals(ctx context.Context, n int) ([]int64, error) {
	first, err := r.reservePostIDs(ctx, n)
	if err != nil {
		return nil, err
	}
	rows := make([]seedPost, n)
	ids := make([]int64, n)
	for i := range rows {
		ids[i] = first + int64(i)
		rows[i] = seedPost{id: ids[i], author: repostedAuthor, body: fmt.Sprintf("a post to repost, number %d", i)}
	}
	return ids, r.copyPosts(ctx, rows, "seed originals")
}

// seedPost is a row of posts the bench writes itself: a post, or a repost
// of repostOf (with an empty body).
type seedPost struct {
	id, author, repostOf int64
	body                 string
}

// reservePostIDs takes n consecutive ids out of the posts' id sequence,
// which moves past them, and returns the first.
func (r *runner) reservePostIDs(ctx context.Context, n int) (int64, error) {
	var last int64
	if err := r.pool.QueryRow(ctx, `SELECT setval(pg_get_serial_sequence('posts', 'id'),
		nextval(pg_get_serial_sequence('posts', 'id')) + $1 - 1)`, n).Scan(&last); err != nil {
		return 0, fmt.Errorf("reserve post ids: %w", err)
	}
	return last - int64(n) + 1, nil
}

// copyPosts writes rows into posts with COPY, with their ids (reserved by
// reservePostIDs).
func (r *runner) copyPosts(ctx context.Context, rows []seedPost, what string) error {
	bar := newBar(r.progress, len(rows), fmt.Sprintf("%-14s", what))
	_, err := r.pool.CopyFrom(ctx, pgx.Identifier{"posts"}, []string{"id", "author_id", "body", "repost_of"},
		&copySource{n: len(rows), bar: bar, rows: func(i int) []any {
			p := rows[i]
			var repostOf *int64
			if p.repostOf != 0 {
				repostOf = &p.repostOf
			}
			return []any{p.id, p.author, p.body, repostOf}
		}})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
