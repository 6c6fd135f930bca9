package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// follows: PUT /v1/following/{id} from closed-loop clients against the
// same statement (the edge, the follower count and the outbox event) done
// straight with pgx; and what a follow costs: ours counts it whole, its
// event dispatched and handled, the limit the statement alone.
func (r *runner) follows(ctx context.Context) error {
	var next atomic.Int64 // every follow is a new edge: a new follower of a quiet author
	edge := func() (int64, int64) {
		i := next.Add(1)
		return followerBase + i, int64(quietBase) + i%quietN
	}
	var ours, limit, ratios []float64
	var costs, limitCosts []*Cost
	for run := range r.opts.Runs {
		var l float64
		limitCost, err := r.measure(ctx, "follow", func() (int64, error) {
			var err error
			var done []time.Duration
			l, done, err = closedLoop(ctx, r.opts.Concurrency, r.opts.StageTime, func(ctx context.Context, _, _ int) error {
				follower, followee := edge()
				_, err := r.db.Follow(ctx, follower, followee)
				return err
			})
			return int64(len(done)), err
		})
		if err != nil {
			return fmt.Errorf("limit: %w", err)
		}
		if err := r.drain(ctx, 2*time.Minute); err != nil { // the limit's events, not measured
			return err
		}
		var o float64
		cost, err := r.measure(ctx, "follow", func() (int64, error) {
			var err error
			var done []time.Duration
			o, done, err = closedLoop(ctx, r.opts.Concurrency, r.opts.StageTime, func(ctx context.Context, _, _ int) error {
				follower, followee := edge()
				return r.follow(ctx, follower, followee)
			})
			if err == nil {
				err = r.drain(ctx, 2*time.Minute)
			}
			return int64(len(done)), err
		})
		if err != nil {
			return err
		}
		ours, limit, ratios = append(ours, o), append(limit, l), append(ratios, ratio(o, l))
		costs, limitCosts = append(costs, cost), append(limitCosts, limitCost)
		fmt.Fprintf(r.progress, "  run %d: API %.0f follows/s (PostgreSQL %.0f µs CPU/follow, whole), pgx %.0f follows/s (%.0f µs/follow)\n",
			run+1, o, cost.PostgresCPUPerUnit, l, limitCost.PostgresCPUPerUnit)
	}
	r.report.add(Stage{
		Name: "follows", Unit: "follows/s", Ours: median(ours), Limit: median(limit), Ratio: median(ratios), Spread: spreadOf(ours, limit, ratios),
		Note: fmt.Sprintf("PUT /v1/following/{id} (cost: with its event dispatched and handled) vs the same statement with pgx, %d clients",
			r.opts.Concurrency),
		Redis: r.redisLabel, Cost: medianCost(costs), LimitCost: medianCost(limitCosts),
	})
	return nil
}

// followerBase is the first of the follows stage's followers, who follow
// nobody else and have no feed.
const followerBase = 9_000_000

// follow makes follower follow followee through the API.
func (r *runner) follow(ctx context.Context, follower, followee int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, r.h.APIURL+"/v1/following/"+strconv.FormatInt(followee, 10), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.token(follower))
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("PUT /v1/following: %s", resp.Status)
	}
	return nil
}
