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
// many entries with the same pipeline size.
func (r *runner) fanoutThroughput(ctx context.Context) error {
	var ours, limit, ratios []float64
	entries := r.opts.FanoutPosts * 1000
	for run := range r.opts.Runs {
		after, err := r.lastOutboxID(ctx)
		if err != nil {
			return err
		}
		var start time.Time
		if err := r.pool.QueryRow(ctx, `SELECT now()`).Scan(&start); err != nil {
			return err
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
			return err
		}
		if err := r.drain(ctx, 5*time.Minute); err != nil {
			return err
		}
		var end time.Time
		if err := r.pool.QueryRow(ctx, `SELECT max(finished_at) FROM outbox WHERE id > $1`, after).Scan(&end); err != nil {
			return err
		}
		o := float64(entries) / end.Sub(start).Seconds()
		took, err := r.rawZADD(ctx, entries, 1000, r.opts.Concurrency)
		if err != nil {
			return err
		}
		l := float64(entries) / took.Seconds()
		ours, limit, ratios = append(ours, o), append(limit, l), append(ratios, o/l)
		fmt.Fprintf(r.progress, "  run %d: fan-out %.0f entries/s, raw ZADD %.0f entries/s\n", run+1, o, l)
	}
	r.report.add(Stage{
		Name: "fan-out", Unit: "entries/s", Ours: median(ours), Limit: median(limit), Ratio: median(ratios),
		Target: "≥ 0.7",
		Note: fmt.Sprintf("%d posts × 1,000 followers, API → outbox → dispatcher → stream → workers → Redis, vs raw ZADD pipelines of %d",
			r.opts.FanoutPosts, r.opts.PageSize),
	})
	return nil
}
