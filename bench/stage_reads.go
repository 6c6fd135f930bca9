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
// set holding the same feed + hydration from Go. With the filtered reads
// selected (withFiltered), each run also measures them (filteredReads).
func (r *runner) feedReads(ctx context.Context) error {
	if r.withFiltered {
		r.filteredDone = true
	}
	return r.readStage(ctx, r.withFiltered)
}

// filteredReads: GET /v1/feed of readers whose feeds hold reposts and who
// mute some of the people they follow (stage_filtered.go), against the
// same raw limit and against the plain reads, both in the same runs. It
// runs inside the read stage's runs (feedReads) when that stage runs too,
// and brings them along when it does not.
func (r *runner) filteredReads(ctx context.Context) error {
	if r.filteredDone {
		fmt.Fprintln(r.progress, "  measured in the runs of feed reads, above")
		return nil
	}
	r.filteredDone = true
	return r.readStage(ctx, true)
}

// plainReaders are the read stage's readers, each read once: first reads
// build their feeds and warm the post cache.
func (r *runner) plainReaders(ctx context.Context) ([]int64, error) {
	readers := make([]int64, r.opts.Readers)
	for i := range readers {
		readers[i] = int64(readerBase + i)
		if err := r.readFeed(ctx, readers[i]); err != nil {
			return nil, err
		}
	}
	return readers, nil
}

// readSide is one kind of read measured in each run: its reads/s, every
// read's latency and each run's cost.
type readSide struct {
	perSec []float64
	lat    []time.Duration
	costs  []*Cost
}

// measureReads runs read from ReadClients closed-loop clients for StageTime,
// each read as a random one of readers, and keeps the figures in side.
func (r *runner) measureReads(ctx context.Context, side *readSide, readers []int64, read func(context.Context, int64) error) error {
	var perSec float64
	var samples []time.Duration
	cost, err := r.measure(ctx, "read", func() (int64, error) {
		var err error
		perSec, samples, err = closedLoop(ctx, r.opts.ReadClients, r.opts.StageTime, func(ctx context.Context, c, i int) error {
			return read(ctx, readers[rand.IntN(len(readers))])
		})
		return int64(len(samples)), err
	})
	if err != nil {
		return err
	}
	side.perSec, side.lat, side.costs = append(side.perSec, perSec), append(side.lat, samples...), append(side.costs, cost)
	return nil
}

func (r *runner) readStage(ctx context.Context, filtered bool) error {
	readers, err := r.plainReaders(ctx)
	if err != nil {
		return err
	}
	var scenario *filteredScenario
	if filtered {
		if scenario, err = r.seedFiltered(ctx); err != nil {
			return err
		}
		for _, u := range scenario.readers {
			if err := r.readFeed(ctx, u); err != nil {
				return err
			}
		}
		if err := r.checkFiltered(ctx, scenario); err != nil {
			return err
		}
	}
	if err := r.copyFeedsToRaw(ctx); err != nil {
		return err
	}
	defer r.dropRawFeeds(context.WithoutCancel(ctx))
	var raw, plain, filt readSide
	var ratios, filtRatios, filtPlain []float64
	for run := range r.opts.Runs {
		if err := r.measureReads(ctx, &raw, readers, r.rawRead); err != nil {
			return fmt.Errorf("limit: %w", err)
		}
		if err := r.measureReads(ctx, &plain, readers, r.readFeed); err != nil {
			return err
		}
		l, o := raw.perSec[run], plain.perSec[run]
		ratios = append(ratios, ratio(o, l))
		fmt.Fprintf(r.progress, "  run %d: GET /v1/feed %.0f reads/s (Redis %.1f µs CPU/read), raw %.0f reads/s (%.1f µs/read)\n",
			run+1, o, plain.costs[run].Redis.CPUPerUnit, l, raw.costs[run].Redis.CPUPerUnit)
		if !filtered {
			continue
		}
		if err := r.measureReads(ctx, &filt, scenario.readers, r.readFeed); err != nil {
			return fmt.Errorf("filtered: %w", err)
		}
		f := filt.perSec[run]
		filtRatios, filtPlain = append(filtRatios, ratio(f, l)), append(filtPlain, ratio(f, o))
		fmt.Fprintf(r.progress, "         filtered %.0f reads/s (Redis %.1f µs CPU/read, PostgreSQL %.1f), %.2f of the plain reads\n",
			f, filt.costs[run].Redis.CPUPerUnit, filt.costs[run].PostgresCPUPerUnit, ratio(f, o))
	}
	p, rawP := percentiles(plain.lat), percentiles(raw.lat)
	r.report.add(Stage{
		Name: "feed reads" + r.nameSuffix, Unit: "reads/s", Ours: median(plain.perSec), Limit: median(raw.perSec), Ratio: median(ratios),
		Spread: spreadOf(plain.perSec, raw.perSec, ratios), Target: "≥ 0.5, p99 ≤ 20 ms", Latency: p,
		Note:  fmt.Sprintf("%d clients, 20 posts a page; limit p99 %.1f ms", r.opts.ReadClients, rawP.P99),
		Redis: r.redisLabel, Cost: medianCost(plain.costs), LimitCost: medianCost(raw.costs),
	})
	if filtered {
		r.reportFiltered(scenario, &raw, &plain, &filt, filtRatios, filtPlain)
	}
	return nil
}

// reportFiltered adds the filtered reads' lines: against the raw limit, and
// against the plain reads of the same runs (what the filters cost).
func (r *runner) reportFiltered(s *filteredScenario, raw, plain, filt *readSide, ratios, vsPlain []float64) {
	fp, pp := percentiles(filt.lat), percentiles(plain.lat)
	w := s.work(20)
	fc, pc := medianCost(filt.costs), medianCost(plain.costs)
	r.report.add(Stage{
		Name: filteredReadsStage + r.nameSuffix, Unit: "reads/s", Ours: median(filt.perSec), Limit: median(raw.perSec),
		Ratio: median(ratios), Spread: spreadOf(filt.perSec, raw.perSec, ratios), Target: "≥ 0.5, p99 ≤ 20 ms", Latency: fp,
		Note: fmt.Sprintf("%d readers of their own, as the read stage's (10 authors, 200 posts each), who also follow 10 reposters "+
			"and mute one author and one reposter each: a fifth of a feed's entries are reposts (of posts the reader sees, and "+
			"twice of posts they do not); a first page of 20 spans %.1f entries of the feed, %.1f of them reposts, in %.1f Redis "+
			"rounds and %.1f PostgreSQL queries for repeats (the scenario's model, mean over the readers; the pages read match "+
			"it); %d clients; limit: feed reads' raw limit in the same runs",
			len(s.readers), w.spanned, w.reposts, w.rounds, w.queries, r.opts.ReadClients),
		Redis: r.redisLabel, Cost: fc,
	})
	r.report.add(Stage{
		Name: "filtered reads / plain reads" + r.nameSuffix, Unit: "reads/s", Ours: median(filt.perSec), Limit: median(plain.perSec),
		Ratio: median(vsPlain), Spread: spreadOf(filt.perSec, plain.perSec, vsPlain),
		Note: fmt.Sprintf("what the filters cost: the filtered reads against feed reads in the same runs; p50 %.1f → %.1f ms, "+
			"p99 %.1f → %.1f ms; per read, Redis CPU %.1f → %.1f µs, PostgreSQL %.1f → %.1f µs, this process %.1f → %.1f µs",
			pp.P50, fp.P50, pp.P99, fp.P99, pc.Redis.CPUPerUnit, fc.Redis.CPUPerUnit, pc.PostgresCPUPerUnit, fc.PostgresCPUPerUnit,
			pc.BenchCPUPerUnit, fc.BenchCPUPerUnit),
		Redis: r.redisLabel,
	})
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
