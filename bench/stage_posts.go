package bench

import (
	"context"
	"fmt"
	"time"
)

// postCreation: POST /v1/posts against the same insert (post + outbox row,
// one transaction) done straight with pgx, at the same concurrency; and what
// a post costs: ours counts it whole, dispatched and fanned out (to nobody:
// these authors have no followers), the limit the insert alone.
func (r *runner) postCreation(ctx context.Context) error {
	var ours, limit, ratios []float64
	var lat []time.Duration
	var costs, limitCosts []*Cost
	for run := range r.opts.Runs {
		var l float64
		limitCost, err := r.measure(ctx, "post", func() (int64, error) {
			var err error
			var done []time.Duration
			l, done, err = closedLoop(ctx, r.opts.Concurrency, r.opts.StageTime, func(ctx context.Context, c, i int) error {
				_, _, err := r.db.CreatePost(ctx, int64(quietBase+(c+i)%quietN), "bench post", "")
				return err
			})
			return int64(len(done)), err
		})
		if err != nil {
			return fmt.Errorf("limit: %w", err)
		}
		if err := r.drain(ctx, 2*time.Minute); err != nil { // the limit's rows, not ours to count
			return err
		}
		var o float64
		var samples []time.Duration
		cost, err := r.measure(ctx, "post", func() (int64, error) {
			var err error
			o, samples, err = closedLoop(ctx, r.opts.Concurrency, r.opts.StageTime, func(ctx context.Context, c, i int) error {
				return r.post(ctx, int64(quietBase+(c+i)%quietN))
			})
			if err == nil { // a post costs its dispatch and its (empty) fan-out too
				err = r.drain(ctx, 2*time.Minute)
			}
			return int64(len(samples)), err
		})
		if err != nil {
			return err
		}
		ours, limit, ratios, lat = append(ours, o), append(limit, l), append(ratios, ratio(o, l)), append(lat, samples...)
		costs, limitCosts = append(costs, cost), append(limitCosts, limitCost)
		fmt.Fprintf(r.progress, "  run %d: API %.0f posts/s, pgx %.0f posts/s\n", run+1, o, l)
	}
	r.report.add(Stage{
		Name: "post creation", Unit: "posts/s", Ours: median(ours), Limit: median(limit), Ratio: median(ratios), Spread: spreadOf(ours, limit, ratios),
		Target: "≥ 0.6", Latency: percentiles(lat),
		Note:  fmt.Sprintf("POST /v1/posts vs the same insert with pgx, %d clients", r.opts.Concurrency),
		Redis: r.redisLabel, Cost: medianCost(costs), LimitCost: medianCost(limitCosts),
	})
	return r.drain(ctx, 2*time.Minute)
}
