package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
)

// feedReads: GET /v1/feed against raw ZREVRANGEBYSCORE of a plain sorted
// set holding the same feed + hydration from Go.
func (r *runner) feedReads(ctx context.Context) error {
	for i := range r.opts.Readers { // first reads build the feeds and warm the post cache
		if err := r.readFeed(ctx, int64(readerBase+i)); err != nil {
			return err
		}
	}
	if err := r.copyFeedsToRaw(ctx); err != nil {
		return err
	}
	defer r.dropRawFeeds(context.WithoutCancel(ctx))
	var ours, limit, ratios []float64
	var lat, rawLat []time.Duration
	var costs, limitCosts []*Cost
	for run := range r.opts.Runs {
		var l float64
		var ls []time.Duration
		limitCost, err := r.measure(ctx, "read", func() (int64, error) {
			var err error
			l, ls, err = closedLoop(ctx, r.opts.ReadClients, r.opts.StageTime, func(ctx context.Context, c, i int) error {
				return r.rawRead(ctx, int64(readerBase+rand.IntN(r.opts.Readers)))
			})
			return int64(len(ls)), err
		})
		if err != nil {
			return fmt.Errorf("limit: %w", err)
		}
		var o float64
		var samples []time.Duration
		cost, err := r.measure(ctx, "read", func() (int64, error) {
			var err error
			o, samples, err = closedLoop(ctx, r.opts.ReadClients, r.opts.StageTime, func(ctx context.Context, c, i int) error {
				return r.readFeed(ctx, int64(readerBase+rand.IntN(r.opts.Readers)))
			})
			return int64(len(samples)), err
		})
		if err != nil {
			return err
		}
		ours, limit, ratios = append(ours, o), append(limit, l), append(ratios, ratio(o, l))
		lat, rawLat = append(lat, samples...), append(rawLat, ls...)
		costs, limitCosts = append(costs, cost), append(limitCosts, limitCost)
		fmt.Fprintf(r.progress, "  run %d: GET /v1/feed %.0f reads/s (Redis %.1f µs CPU/read), raw %.0f reads/s (%.1f µs/read)\n",
			run+1, o, cost.Redis.CPUPerUnit, l, limitCost.Redis.CPUPerUnit)
	}
	p := percentiles(lat)
	r.report.add(Stage{
		Name: "feed reads" + r.nameSuffix, Unit: "reads/s", Ours: median(ours), Limit: median(limit), Ratio: median(ratios), Spread: spreadOf(ours, limit, ratios),
		Target: "≥ 0.5, p99 ≤ 20 ms", Latency: p,
		Note:  fmt.Sprintf("%d clients, 20 posts a page; limit p99 %.1f ms", r.opts.ReadClients, percentiles(rawLat).P99),
		Redis: r.redisLabel, Cost: medianCost(costs), LimitCost: medianCost(limitCosts),
	})
	return nil
}

// rawFeedKey is the plain sorted set that holds a copy of user's feed for
// the read limit.
func (r *runner) rawFeedKey(user int64) string {
	return r.h.Prefix + "rawfeed:{" + strconv.FormatInt(user, 10) + "}"
}

// copyFeedsToRaw writes each reader's feed, as the warm-up reads built it,
// into a plain sorted set (member = score = post id): what the limit reads.
func (r *runner) copyFeedsToRaw(ctx context.Context) error {
	users := make([]int64, r.opts.Readers)
	for i := range users {
		users[i] = int64(readerBase + i)
	}
	for start := 0; start < len(users); start += 500 {
		batch := users[start:min(start+500, len(users))]
		feeds, err := feed.InspectMany(ctx, r.rdb, r.h.Prefix, batch)
		if err != nil {
			return fmt.Errorf("copy feeds for the read limit: %w", err)
		}
		if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, f := range feeds {
				members := make([]redis.Z, len(f.IDs))
				for j, id := range f.IDs {
					members[j] = redis.Z{Score: float64(id), Member: id}
				}
				p.Del(ctx, r.rawFeedKey(batch[i]))
				if len(members) > 0 {
					p.ZAdd(ctx, r.rawFeedKey(batch[i]), members...)
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("copy feeds for the read limit: %w", err)
		}
	}
	return nil
}

func (r *runner) dropRawFeeds(ctx context.Context) {
	_, _ = r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { // best effort: the next run writes the same keys anew
		for i := range r.opts.Readers {
			p.Del(ctx, r.rawFeedKey(int64(readerBase+i)))
		}
		return nil
	})
}

// rawRead is a feed page done by hand: the ids, then the cached posts.
func (r *runner) rawRead(ctx context.Context, user int64) error {
	ids, err := r.rdb.ZRevRangeByScore(ctx, r.rawFeedKey(user), &redis.ZRangeBy{Max: "+inf", Min: "(0", Count: 21}).Result()
	if err != nil {
		return err
	}
	cmds := make([]*redis.StringCmd, len(ids))
	_, err = r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Get(ctx, r.h.Prefix+"post:"+id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	posts := make([]domain.Post, 0, len(ids))
	for _, c := range cmds {
		var p domain.Post
		if err := json.Unmarshal([]byte(c.Val()), &p); err != nil {
			return err
		}
		posts = append(posts, p)
	}
	var buf bytes.Buffer
	return json.NewEncoder(&buf).Encode(map[string]any{"items": posts})
}
