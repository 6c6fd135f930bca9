package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// fanoutThroughput: feed entries written per second end to end, from the
// first POST to the last fan-out finished, against raw pipelined ZADD of as
// many entries with the same pipeline size; and what each entry cost Redis
// (every primary), PostgreSQL and this process, on both sides.
func (r *runner) fanoutThroughput(ctx context.Context) error {
	var ours, limit, ratios []float64
	var costs, limitCosts []*Cost
	entries := r.opts.FanoutPosts * 1000
	for run := range r.opts.Runs {
		var o float64
		cost, err := r.measure(ctx, "entry", func() (int64, error) {
			var err error
			o, err = r.fanoutOnce(ctx)
			return int64(entries), err
		})
		if err != nil {
			return err
		}
		var took time.Duration
		limitCost, err := r.measure(ctx, "entry", func() (int64, error) {
			var err error
			took, err = r.rawZADD(ctx, entries, 1000, r.opts.Concurrency)
			return int64(entries), err
		})
		if err != nil {
			return err
		}
		l := float64(entries) / took.Seconds()
		ours, limit, ratios = append(ours, o), append(limit, l), append(ratios, o/l)
		costs, limitCosts = append(costs, cost), append(limitCosts, limitCost)
		fmt.Fprintf(r.progress, "  run %d: fan-out %.0f entries/s (Redis %.2f µs CPU/entry), raw ZADD %.0f entries/s (%.2f µs/entry)\n",
			run+1, o, cost.Redis.CPUPerUnit, l, limitCost.Redis.CPUPerUnit)
	}
	sample := make([]int64, min(100, 1000))
	for i := range sample {
		sample[i] = int64(FollowerBase + i*(1000/len(sample)))
	}
	bpe, err := r.bytesPerEntry(ctx, sample)
	if err != nil {
		return err
	}
	r.report.add(Stage{
		Name: "fan-out" + r.nameSuffix, Unit: "entries/s", Ours: median(ours), Limit: median(limit), Ratio: median(ratios),
		Spread: spreadOf(ours, limit, ratios),
		Target: "≥ 0.7",
		Note: fmt.Sprintf("%d posts × 1,000 followers, API → outbox → dispatcher → stream → workers → Redis, vs raw ZADD pipelines of %d",
			r.opts.FanoutPosts, r.opts.PageSize),
		Redis: r.redisLabel, Cost: medianCost(costs), LimitCost: medianCost(limitCosts), BytesPerEntry: bpe,
	})
	return nil
}

// fanoutOnce posts FanoutPosts posts to 1,000 followers each and returns the
// entries per second from the first POST to the last fan-out finished.
func (r *runner) fanoutOnce(ctx context.Context) (float64, error) {
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
			for i := next.Add(1) - 1; i < int64(r.opts.FanoutPosts); i = next.Add(1) - 1 {
				if err := r.post(ctx, fanoutBase+i%fanoutN); err != nil {
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
	return float64(r.opts.FanoutPosts*1000) / end.Sub(start).Seconds(), nil
}
