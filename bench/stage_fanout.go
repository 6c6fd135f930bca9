package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// fanoutFollowers is how many followers the fan-out stage's authors have
// (the same users for each of them: FollowerBase, FollowerBase+1, …).
const fanoutFollowers = 1000

// fanoutThroughput: feed entries written per second end to end, from the
// first POST to the last fan-out finished, into fresh feeds (emptied before
// each run, as a first read leaves them), against raw pipelined ZADD of as
// many entries with the same pipeline size into as many sorted sets; and
// what each entry cost Redis (every primary), PostgreSQL and this process,
// on both sides.
//
// With the repost fan-out selected (withReposts), each run also fans out as
// many reposts as posts into the same followers' fresh feeds, measured
// against the run's post fan-out (repostFanout).
func (r *runner) fanoutThroughput(ctx context.Context) error {
	if r.withReposts {
		r.repostsDone = true
	}
	return r.fanoutStage(ctx, false, r.withReposts)
}

// repostFanout: reposts fanned out as the fan-out stage's posts are, to the
// same 1,000 followers, end to end, against the post fan-out in the same
// runs, with what each entry cost. It runs inside the fan-out stage's runs
// (fanoutThroughput) when that stage runs too, and brings them along when
// it does not.
func (r *runner) repostFanout(ctx context.Context) error {
	if r.repostsDone {
		fmt.Fprintln(r.progress, "  measured in the runs of fan-out throughput, above")
		return nil
	}
	r.repostsDone = true
	return r.fanoutStage(ctx, false, true)
}

// fanoutFullFeeds: the same with every follower's feed full, feed.max_len
// entries, before each run, against raw ZADD into sorted sets that hold as
// many entries before it.
func (r *runner) fanoutFullFeeds(ctx context.Context) error { return r.fanoutStage(ctx, true, false) }

// fanoutReaders returns the fan-out stage's followers and, by follower,
// whom each follows (what their feeds are seeded with).
func (r *runner) fanoutReaders(ctx context.Context) (followers []int64, readers map[int64][]int64, err error) {
	followers = make([]int64, fanoutFollowers)
	for i := range followers {
		followers[i] = int64(FollowerBase + i)
	}
	readers, err = r.db.FolloweesOf(ctx, followers)
	return followers, readers, err
}

func (r *runner) fanoutStage(ctx context.Context, full, reposts bool) error {
	_, readers, err := r.fanoutReaders(ctx)
	if err != nil {
		return err
	}
	var rp *repostRuns
	if reposts {
		if rp, err = r.newRepostRuns(ctx); err != nil {
			return err
		}
	}
	var ids []int64 // what full feeds hold before each run, raw sets alike
	if full {
		if ids, err = r.reserveIDs(ctx, r.opts.MaxLen); err != nil {
			return err
		}
	}
	seeder := r.seeder()
	var ours, limit, ratios, cpu, rawCPU, cpuRatios []float64
	var costs, limitCosts []*Cost
	var encoding string
	entries := r.opts.FanoutPosts * fanoutFollowers
	for run := range r.opts.Runs {
		if full {
			err = seeder.SeedFull(ctx, readers, ids)
		} else {
			err = seeder.SeedEmpty(ctx, readers)
		}
		if err != nil {
			return fmt.Errorf("followers' feeds: %w", err)
		}
		var o float64
		cost, err := r.measure(ctx, "entry", func() (int64, error) {
			var err error
			o, err = r.fanoutOnce(ctx)
			return int64(entries), err
		})
		if err != nil {
			return err
		}
		sets := r.rawSets("raw", fanoutFollowers)
		if encoding, err = sets.create(ctx, ids); err != nil {
			return err
		}
		first := randomFirst()
		if full {
			first = ids[len(ids)-1] + 1 // newer than what the sets hold, as posts are
		}
		var took time.Duration
		limitCost, err := r.measure(ctx, "entry", func() (int64, error) {
			var err error
			took, err = sets.write(ctx, entries, r.opts.Concurrency, first)
			return int64(entries), err
		})
		if err == nil {
			err = sets.drop(ctx)
		}
		if err != nil {
			return err
		}
		l := float64(entries) / took.Seconds()
		ours, limit, ratios = append(ours, o), append(limit, l), append(ratios, ratio(o, l))
		costs, limitCosts = append(costs, cost), append(limitCosts, limitCost)
		c, rc := cost.Redis.CPUPerUnit, limitCost.Redis.CPUPerUnit
		cpu, rawCPU, cpuRatios = append(cpu, c), append(rawCPU, rc), append(cpuRatios, ratio(c, rc))
		fmt.Fprintf(r.progress, "  run %d: fan-out %.0f entries/s (Redis %.2f µs CPU/entry), raw ZADD %.0f entries/s (%.2f µs/entry)\n",
			run+1, o, c, l, rc)
		if rp != nil {
			if err := seeder.SeedEmpty(ctx, readers); err != nil {
				return fmt.Errorf("followers' feeds: %w", err)
			}
			if err := rp.run(ctx, run, o, cost); err != nil {
				return err
			}
		}
	}
	sample := make([]int64, 100)
	for i := range sample {
		sample[i] = int64(FollowerBase + i*(fanoutFollowers/len(sample)))
	}
	bpe, err := r.bytesPerEntry(ctx, sample)
	if err != nil {
		return err
	}
	name, feeds := "fan-out", "fresh feeds (emptied before each run, as a first read leaves them)"
	rawSets := fmt.Sprintf("%s sorted sets", humanInt(fanoutFollowers))
	if full {
		name = "fan-out at full feeds"
		feeds = fmt.Sprintf("full feeds (%d entries each before each run)", r.opts.MaxLen)
		rawSets += fmt.Sprintf(" holding %d members each before it", r.opts.MaxLen)
	}
	rawSets += fmt.Sprintf(" (OBJECT ENCODING %s: Redis' default for sets this size, what a team would run)", encoding)
	r.report.add(Stage{
		Name: name + r.nameSuffix, Unit: "entries/s", Ours: median(ours), Limit: median(limit), Ratio: median(ratios),
		Spread: spreadOf(ours, limit, ratios), Target: "≥ 0.8",
		Note: fmt.Sprintf("%d posts × %s followers into %s, API → outbox → dispatcher → stream → workers → Redis, "+
			"vs raw ZADD pipelines of %d into %s", r.opts.FanoutPosts, humanInt(fanoutFollowers), feeds, r.opts.PageSize, rawSets),
		Redis: r.redisLabel, Cost: medianCost(costs), LimitCost: medianCost(limitCosts), BytesPerEntry: bpe,
	})
	r.report.add(Stage{
		Name: "Redis CPU per entry, " + name + r.nameSuffix, Unit: "µs/entry", Ours: median(cpu), Limit: median(rawCPU),
		Ratio: median(cpuRatios), Spread: spreadOf(cpu, rawCPU, cpuRatios), Target: "≤ 1.3× raw ZADD",
		Note: "used_cpu_sys + used_cpu_user of every primary (INFO cpu) over the run, per entry, ours vs the raw ZADD's; " +
			"where it went: the cost table (INFO commandstats)",
		Redis: r.redisLabel,
	})
	if rp != nil {
		rp.report()
	}
	return nil
}

// fanoutOnce posts FanoutPosts posts to 1,000 followers each and returns the
// entries per second from the first POST to the last fan-out finished.
func (r *runner) fanoutOnce(ctx context.Context) (float64, error) {
	return r.fanOutEach(ctx, r.opts.FanoutPosts, func(ctx context.Context, i int64) error {
		return r.post(ctx, fanoutBase+i%fanoutN)
	})
}

// fanOutEach makes n entries of the fan-out stage's authors (create(i), a
// post or a repost, each to 1,000 followers) from Concurrency clients and
// returns the feed entries per second from the first request to the last
// fan-out finished.
func (r *runner) fanOutEach(ctx context.Context, n int, create func(ctx context.Context, i int64) error) (float64, error) {
	after, err := r.lastOutboxID(ctx)
	if err != nil {
		return 0, err
	}
	var start time.Time
	if err := r.pool.QueryRow(ctx, `SELECT now()`).Scan(&start); err != nil {
		return 0, err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var postErr atomic.Value
	for range r.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := create(ctx, i); err != nil {
					postErr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := postErr.Load().(error); err != nil {
		return 0, err
	}
	if err := r.drain(ctx, 5*time.Minute); err != nil {
		return 0, err
	}
	var end time.Time
	if err := r.pool.QueryRow(ctx, `SELECT max(finished_at) FROM outbox WHERE id > $1`, after).Scan(&end); err != nil {
		return 0, err
	}
	return float64(n*fanoutFollowers) / end.Sub(start).Seconds(), nil
}
