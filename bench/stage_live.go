package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The live stage (issue 13): what the live path adds to fan-out's Redis
// cost, with nobody connected and with every follower connected to
// GET /v1/feed/stream, each against fan-out without the live path in the
// same run; and how long a post takes from its commit to a connected
// reader's stream.
const (
	// liveMaxPosts bounds the posts of one cost measurement: a stream falls
	// behind by at most that many events, below the hub's buffer (256)
	// past which it would be dropped as a slow reader.
	liveMaxPosts = 200
	// liveRate is the posts per second of the latency measurement, each to
	// every connected follower.
	liveRate = 20
	// liveSettle is how long after the streams open the cost and latency
	// measurements start: a stream reads its feed again 1 s and 5 s after
	// it opens (for a post fanned out by a worker that did not know of it
	// yet), and those reads are the stream's cost, not fan-out's.
	liveSettle = 5500 * time.Millisecond
	// liveWait bounds the wait for every event of a measurement, and
	// liveQuiet the wait after the last one that came.
	liveWait  = 30 * time.Second
	liveQuiet = 2 * time.Second
)

// liveCondition is one of the three ways fan-out runs in the stage.
type liveCondition int

const (
	liveOff       liveCondition = iota // workers without the live path: the baseline
	liveIdle                           // the live path on, nobody connected
	liveConnected                      // the live path on, every follower connected
)

func (c liveCondition) String() string {
	return [...]string{"live path off", "live path idle", "every follower connected"}[c]
}

// livePosts is the posts of one cost measurement, to fanoutFollowers
// followers each: a fifth of the fan-out stage's, at most liveMaxPosts.
func (r *runner) livePosts() int { return min(max(r.opts.FanoutPosts/5, 1), liveMaxPosts) }

// liveRun is one run's measurements, by condition: the off and idle ones
// twice, before and after the connected one (off, idle, connected, idle,
// off; every other run idle first), so that a drift of the machine over
// the run weighs on each alike.
type liveRun struct {
	cost [3][]*Cost
	rate [3][]float64 // entries per second, first POST → last fan-out finished
	// messages is the SPUBLISH calls (live messages) during the
	// measurements, and publish their time in µs per entry (commandstats):
	// the messages and their delivery to the hubs' connections.
	messages [3]int64
	publish  [3][]float64
	// events and ended: post events the streams read, and streams the
	// server ended, in the connected measurement.
	events, ended int64
}

// cpu is a condition's Redis CPU per entry in the run: the mean of its
// measurements.
func (lr *liveRun) cpu(c liveCondition) float64 {
	var sum float64
	for _, cost := range lr.cost[c] {
		sum += cost.Redis.CPUPerUnit
	}
	return sum / float64(max(len(lr.cost[c]), 1))
}

// liveStreams: Redis CPU per feed entry of FanoutPosts/5 posts (at most
// 200) to the fan-out stage's 1,000 followers, into fresh feeds, with the
// live path off, idle and with every follower connected; then the delivery
// latency to connected readers.
func (r *runner) liveStreams(ctx context.Context) error {
	if r.ownWorkers {
		// The in-process workers were stopped: a worker process (with the
		// live path) fans out, and there is no baseline.
		p, err := r.startWorker(ctx)
		if err != nil {
			return err
		}
		defer p.Stop()
	}
	baseline := r.h.SetLive != nil && !r.ownWorkers
	if !baseline {
		fmt.Fprintln(r.progress, "  no baseline: the workers cannot run without the live path here "+
			"(needs Roles.WorkersWithoutLive: in process, where the bench can run them alike); "+
			"the connected runs are compared with the idle ones")
	}
	followers, readers, err := r.fanoutReaders(ctx)
	if err != nil {
		return err
	}
	lm := &liveMeasure{r: r, followers: followers, readers: readers, posts: r.livePosts(), live: true}
	defer lm.restore()
	var runs []liveRun
	var latency []Stage
	for run := range r.opts.Runs {
		if run == r.opts.Runs-1 { // with the streams of the last connected measurement
			lm.latency = func(ctx context.Context, streams *sseClients) error {
				for _, load := range []liveLoad{r.lightLoad(), r.burstLoad()} {
					lines, err := r.liveLatency(ctx, streams, followers, load)
					if err != nil {
						return fmt.Errorf("%s: %w", load.name, err)
					}
					latency = append(latency, lines...)
				}
				return nil
			}
		}
		start := time.Now()
		first, second := liveOff, liveIdle
		if run%2 == 1 {
			first, second = liveIdle, liveOff
		}
		order := []liveCondition{first, second, liveConnected, second, first}
		if !baseline {
			order = []liveCondition{liveIdle, liveConnected, liveIdle}
		}
		var lr liveRun
		for _, c := range order {
			if err := lm.run(ctx, c, &lr); err != nil {
				return fmt.Errorf("%s: %w", c, err)
			}
		}
		runs = append(runs, lr)
		r.printLiveRun(run, &lr, lm.entries(), baseline, time.Since(start))
	}
	r.reportLiveCost(runs, lm.posts, lm.entries(), baseline)
	for _, s := range latency {
		r.report.add(s)
	}
	return nil
}

// liveMeasure measures the fan-out of posts posts to followers in one
// condition.
type liveMeasure struct {
	r         *runner
	followers []int64
	readers   map[int64][]int64 // followee lists, for SeedEmpty
	posts     int
	live      bool // the in-process workers run with the live path
	// latency, when set, measures the delivery latency with the streams
	// of the next connected measurement, after it.
	latency func(ctx context.Context, streams *sseClients) error
}

func (m *liveMeasure) entries() int64 { return int64(m.posts * len(m.followers)) }

// restore leaves the workers with the live path, as they started.
func (m *liveMeasure) restore() {
	if !m.live {
		_ = m.r.h.SetLive(true)
	}
}

// setLive runs the in-process workers with the live path or without it.
func (m *liveMeasure) setLive(ctx context.Context, on bool) error {
	if m.live == on {
		return nil
	}
	if err := m.r.h.SetLive(on); err != nil {
		return err
	}
	m.live = on
	// A post through the new workers, so that their start is not measured.
	if err := m.r.post(ctx, fanoutBase); err != nil {
		return err
	}
	return m.r.drain(ctx, time.Minute)
}

// run measures one condition into lr: the followers' feeds emptied, then
// posts posts; with every follower connected, until their streams read
// every event (or stopped getting any).
func (m *liveMeasure) run(ctx context.Context, c liveCondition, lr *liveRun) error {
	r := m.r
	var streams *sseClients
	defer func() { streams.close() }()
	err := m.setLive(ctx, c != liveOff)
	switch {
	case err != nil:
	case c != liveConnected: // the streams of the last connected measurement are gone
		err = r.waitNobodyConnected(ctx)
	default:
		if streams, err = r.openStreams(ctx, m.followers); err == nil {
			err = sleepCtx(ctx, liveSettle)
		}
	}
	if err == nil {
		err = r.seeder().SeedEmpty(ctx, m.readers)
	}
	if err != nil {
		return err
	}
	before, err := redisSnapshot(ctx, r.rdb)
	if err != nil {
		return err
	}
	streams.reset()
	var rate float64
	cost, err := r.measure(ctx, "fan-out entry", func() (int64, error) {
		var err error
		rate, err = r.livePostsOnce(ctx, m.posts)
		if err == nil && streams != nil {
			// Until the hubs' last hydration and writes are done.
			err = streams.waitPosts(ctx, m.entries(), liveWait)
		}
		return m.entries(), err
	})
	if err != nil {
		return err
	}
	after, err := redisSnapshot(ctx, r.rdb)
	if err != nil {
		return err
	}
	lr.cost[c], lr.rate[c] = append(lr.cost[c], cost), append(lr.rate[c], rate)
	lr.messages[c] += callsDelta(before, after, "spublish")
	lr.publish[c] = append(lr.publish[c], float64(usecDelta(before, after, "spublish"))/float64(m.entries()))
	if streams != nil {
		lr.events, lr.ended = streams.posts.Load(), streams.ended.Load()
		if m.latency != nil {
			latency := m.latency
			m.latency = nil
			return latency(ctx, streams)
		}
	}
	return nil
}

func (r *runner) printLiveRun(run int, lr *liveRun, entries int64, baseline bool, took time.Duration) {
	each := func(c liveCondition) string {
		parts := make([]string, len(lr.cost[c]))
		for i, cost := range lr.cost[c] {
			parts[i] = fmt.Sprintf("%.2f (%.0f entries/s)", cost.Redis.CPUPerUnit, lr.rate[c][i])
		}
		return strings.Join(parts, ", ")
	}
	line := fmt.Sprintf("  run %d: Redis µs/entry", run+1)
	if baseline {
		line += " off " + each(liveOff) + ";"
	}
	line += fmt.Sprintf(" idle %s, %d SPUBLISH; connected %s, %d SPUBLISH (%.3f µs/entry), %d of %d events, %d streams ended",
		each(liveIdle), lr.messages[liveIdle], each(liveConnected), lr.messages[liveConnected], median(lr.publish[liveConnected]),
		lr.events, entries, lr.ended)
	if baseline {
		line += fmt.Sprintf("; idle/off %.3f, connected/off %.3f",
			ratio(lr.cpu(liveIdle), lr.cpu(liveOff)), ratio(lr.cpu(liveConnected), lr.cpu(liveOff)))
	}
	fmt.Fprintf(r.progress, "%s (%s)\n", line, took.Round(100*time.Millisecond))
}

// reportLiveCost adds the cost lines: idle against off, connected against
// off (against idle without a baseline).
func (r *runner) reportLiveCost(runs []liveRun, posts int, entries int64, baseline bool) {
	base := liveOff
	if !baseline {
		base = liveIdle
	}
	series := func(c liveCondition) (cpu []float64, costs []*Cost) {
		for i := range runs {
			cpu, costs = append(cpu, runs[i].cpu(c)), append(costs, runs[i].cost[c]...)
		}
		return cpu, costs
	}
	baseCPU, baseCosts := series(base)
	var messages [3]int64
	var publish [3][]float64
	var events, ended int64
	for _, lr := range runs {
		for c := range lr.messages {
			messages[c] += lr.messages[c]
			publish[c] = append(publish[c], lr.publish[c]...)
		}
		events += lr.events
		ended += lr.ended
	}
	what := fmt.Sprintf("%d posts × %s followers into fresh feeds (emptied before each measurement), API → outbox → "+
		"dispatcher → stream → workers → Redis; used_cpu_sys + used_cpu_user of every primary over the measurement "+
		"(the hubs' work on the messages included), per entry; each run measures off, idle, connected, idle, off "+
		"(every other run idle first) and takes the mean of a condition's measurements", posts, humanInt(fanoutFollowers))
	against := "the same fan-out by the same in-process workers without the live path (no live publisher), in the same run"
	if !baseline {
		against = "the same fan-out with the live path idle (no baseline without the live path here)"
	}
	for _, c := range []liveCondition{liveIdle, liveConnected} {
		if c == base {
			continue
		}
		cpu, costs := series(c)
		var ratios []float64
		for i := range cpu {
			ratios = append(ratios, ratio(cpu[i], baseCPU[i]))
		}
		name, target := "live path idle: Redis CPU per fan-out entry", "≤ 1.10"
		note := fmt.Sprintf("nobody connected: %d SPUBLISH in %d runs", messages[c], len(runs))
		if rep := repeatability(runs); len(rep) > 0 {
			note += fmt.Sprintf("; the noise: two measurements of one condition in a run (off, idle) differed by %.0f %% "+
				"(median; %.0f–%.0f %%)", 100*median(rep), 100*slices.Min(rep), 100*slices.Max(rep))
		}
		if c == liveConnected {
			name, target = "live path, every follower connected: Redis CPU per fan-out entry", "≤ 1.25"
			note = fmt.Sprintf("%s streams open (GET /v1/feed/stream, one per follower, measured from %s after they opened): "+
				"%d SPUBLISH in %d runs (one per post and serve process), %.3f µs per entry in commandstats (median); "+
				"%d of %d post events read, %d streams ended by the server",
				humanInt(fanoutFollowers), liveSettle, messages[c], len(runs), median(publish[c]),
				events, int64(len(runs))*entries, ended)
		}
		r.report.add(Stage{
			Name: name + r.nameSuffix, Unit: "µs/entry", Ours: median(cpu), Limit: median(baseCPU), Ratio: median(ratios),
			Spread: spreadOf(cpu, baseCPU, ratios), Target: target,
			Note:  fmt.Sprintf("%s; %s; limit column: %s", note, what, against),
			Redis: r.redisLabel, Cost: medianCost(costs), LimitCost: medianCost(baseCosts),
		})
	}
}

// repeatability is how far apart, relatively, the two measurements of each
// condition measured twice in a run were.
func repeatability(runs []liveRun) []float64 {
	var out []float64
	for _, lr := range runs {
		for _, costs := range lr.cost {
			if len(costs) == 2 {
				a, b := costs[0].Redis.CPUPerUnit, costs[1].Redis.CPUPerUnit
				out = append(out, ratio(math.Abs(a-b), (a+b)/2))
			}
		}
	}
	return out
}

// livePostsOnce posts n posts of the fan-out stage's authors and returns
// the entries per second from the first POST to the last fan-out finished.
func (r *runner) livePostsOnce(ctx context.Context, n int) (float64, error) {
	saved := r.opts.FanoutPosts
	r.opts.FanoutPosts = n
	defer func() { r.opts.FanoutPosts = saved }()
	return r.fanoutOnce(ctx)
}

// liveLatency: post committed (its created_at, on the database clock) →
// the post's event read by a connected reader's client, with streams of
// every follower open, posts at liveRate (open loop) for twice
// LatencyTime; and from the post's fan-out finished, against a raw
// Pub/Sub round trip. It returns the report's lines.
func (r *runner) liveLatency(ctx context.Context, streams *sseClients, followers []int64, load liveLoad) ([]Stage, error) {
	after, err := r.lastOutboxID(ctx)
	if err != nil {
		return nil, err
	}
	streams.reset()
	streams.record.Store(true)
	sent, err := r.openLoop(ctx, load.rate, load.length, func(i int) int64 { return fanoutBase + int64(i%fanoutN) })
	if err != nil {
		return nil, err
	}
	if err := r.drain(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	want := int64(sent * len(followers))
	if err := streams.waitPosts(ctx, want, liveWait); err != nil {
		return nil, err
	}
	streams.record.Store(false)
	if streams.posts.Load() == 0 {
		return nil, fmt.Errorf("none of %d posts reached any of %d streams", sent, len(followers))
	}
	finished, err := r.fanoutFinished(ctx, after)
	if err != nil {
		return nil, err
	}
	raw, err := r.rawPubSub(ctx, sent)
	if err != nil {
		return nil, err
	}
	all, last, afterFeed, feedWritten := streams.latencies(finished)
	pAll, pLast := percentiles(all), percentiles(last)
	pAfter, pFeed := percentiles(afterFeed), percentiles(feedWritten)
	full, seen := streams.coverage(len(followers))
	n := humanInt(len(followers))
	where := fmt.Sprintf("%d posts at %d posts/s (open loop) to %s followers, every one connected (%d of %d events read, "+
		"%d posts read by every reader, %d streams ended by the server)",
		sent, load.rate, n, streams.posts.Load(), want, full, streams.ended.Load())
	lines := []Stage{{
		Name: "live delivery" + load.name + ": post committed → event at a connected reader" + r.nameSuffix, Unit: "ms (p50)",
		Ours: pAll.P50, Limit: pFeed.P50, Ratio: ratio(pAll.P50, pFeed.P50), Latency: pAll, Target: load.target,
		Note: fmt.Sprintf("%s; every (post, reader) pair: the post's created_at → its event read by the reader's SSE client "+
			"(one machine, one clock); limit column: post committed → its fan-out finished (outbox finished_at − created_at), p50",
			where),
		Redis: r.redisLabel,
	}, {
		Name: "live delivery" + load.name + ": fan-out finished → event at a connected reader" + r.nameSuffix, Unit: "ms (p50)",
		Ours: pAfter.P50, Limit: raw.P50, Ratio: ratio(pAfter.P50, raw.P50), Latency: pAfter, Target: load.afterFeed,
		Note: "the same pairs from the post's outbox finished_at (after its feeds were written; an event may come first: " +
			"the worker publishes after each page, then marks the row done) → the event read; issue 13: within 100 ms of the post " +
			fmt.Sprintf("landing in the feed; limit column: raw SPUBLISH → a subscriber's read of it, %d one after the other, p50", raw.N),
		Redis: r.redisLabel,
	}, {
		Name: "live delivery" + load.name + ": post committed → event at the last of " + n + " readers" + r.nameSuffix, Unit: "ms (p50)",
		Ours: pLast.P50, Limit: pFeed.P50, Ratio: ratio(pLast.P50, pFeed.P50), Latency: pLast,
		Note:  "the same posts, each at its last reader; limit column: post committed → its fan-out finished, p50",
		Redis: r.redisLabel,
	}}
	fmt.Fprintf(r.progress, "  %s: %d of %d events read, %d of %d posts read by every reader (%d by any), %d streams ended by the server\n",
		load.what, streams.posts.Load(), want, full, sent, seen, streams.ended.Load())
	fmt.Fprintf(r.progress, "  committed → event: p50 %.1f ms, p95 %.1f, p99 %.1f (%d events); at the last of %s: p50 %.1f, p99 %.1f\n",
		pAll.P50, pAll.P95, pAll.P99, pAll.N, n, pLast.P50, pLast.P99)
	fmt.Fprintf(r.progress, "  fan-out finished → event: p50 %.1f, p99 %.1f; committed → fan-out finished: p50 %.1f, p99 %.1f; raw SPUBLISH → read: p50 %.2f, p99 %.2f\n",
		pAfter.P50, pAfter.P99, pFeed.P50, pFeed.P99, raw.P50, raw.P99)
	return lines, nil
}

// liveLoad is how the delivery latency's posts come: at rate posts a
// second for length, open loop.
type liveLoad struct {
	name   string // in the stage's name, after "live delivery"
	what   string // in the progress lines
	target string // of post committed → event at a connected reader
	// afterFeed is the target of fan-out finished → event (issue 13's, for
	// light load).
	afterFeed string
	rate      int
	length    time.Duration
}

// lightLoad is liveRate posts a second for twice --latency-time.
func (r *runner) lightLoad() liveLoad {
	return liveLoad{what: "light load", rate: liveRate, length: 2 * r.opts.LatencyTime, target: "p99 ≤ 15 ms",
		afterFeed: "p99 ≤ 100 ms"}
}

// burstLoad is the cost measurement's posts (200 by default) sent within
// 100 ms, each to every connected follower (issue 24: a burst's delivery).
func (r *runner) burstLoad() liveLoad {
	n := r.livePosts()
	return liveLoad{name: fmt.Sprintf(" (a burst of %d posts)", n), what: "burst",
		rate: 10 * n, length: liveBurst, target: "p99 ≤ 1 s"}
}

// liveBurst is how long the burst's posts take to send.
const liveBurst = 100 * time.Millisecond

// rawPubSub is n round trips, one after the other, from SPUBLISH to a
// subscriber of the shard channel reading the message: the floor of a push
// through Redis Pub/Sub.
func (r *runner) rawPubSub(ctx context.Context, n int) (Percentiles, error) {
	channel := r.h.Prefix + "bench:pubsub:{raw}"
	ps := r.rdb.SSubscribe(ctx, channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		return Percentiles{}, fmt.Errorf("SSUBSCRIBE: %w", err)
	}
	msgs := ps.Channel()
	took := make([]time.Duration, 0, n)
	for range max(n, 1) {
		t := time.Now()
		if err := r.rdb.SPublish(ctx, channel, "x").Err(); err != nil {
			return Percentiles{}, fmt.Errorf("SPUBLISH: %w", err)
		}
		select {
		case <-msgs:
		case <-time.After(5 * time.Second):
			return Percentiles{}, errors.New("raw Pub/Sub: a message did not arrive in 5 s")
		case <-ctx.Done():
			return Percentiles{}, ctx.Err()
		}
		took = append(took, time.Since(t))
	}
	return percentiles(took), nil
}

// openLoop posts at rate posts per second for d, the i-th post by
// author(i), without waiting for one post to start the next, and returns
// how many it sent.
func (r *runner) openLoop(ctx context.Context, rate int, d time.Duration, author func(i int) int64) (int, error) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	var postErr atomic.Value
	sent := 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		<-tick.C
		a := author(sent)
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.post(ctx, a); err != nil {
				postErr.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := postErr.Load().(error); err != nil {
		return sent, err
	}
	return sent, ctx.Err()
}

// fanoutFinished is when the fan-out of each post created after the
// outbox row after finished (database clock), by post id.
func (r *runner) fanoutFinished(ctx context.Context, after int64) (map[int64]feedWrite, error) {
	rows, err := r.pool.Query(ctx, `SELECT (payload->>'post_id')::bigint, created_at, finished_at FROM outbox
		WHERE id > $1 AND event_type = 'post.created' AND status = 'done'`, after)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]feedWrite{}
	for rows.Next() {
		var id int64
		var w feedWrite
		if err := rows.Scan(&id, &w.created, &w.finished); err != nil {
			return nil, err
		}
		out[id] = w
	}
	return out, rows.Err()
}

// feedWrite is when a post committed and when its fan-out finished.
type feedWrite struct{ created, finished time.Time }

// waitNobodyConnected waits until no hub holds a stream (their presence in
// Redis is empty), and a moment more for the publishers to hear it.
func (r *runner) waitNobodyConnected(ctx context.Context) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := r.liveUsers(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return sleepCtx(ctx, 200*time.Millisecond)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d readers still connected 15 s after their streams closed", n)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// liveUsers counts the users the hubs hold streams for: the fields of every
// hub's users hash (live.keys.users, "<prefix>live:users:{instance}").
func (r *runner) liveUsers(ctx context.Context) (int64, error) {
	nodes, err := primaries(ctx, r.rdb)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, node := range nodes {
		iter := node.Scan(ctx, 0, r.h.Prefix+"live:users:*", 1000).Iterator()
		for iter.Next(ctx) {
			c, err := node.HLen(ctx, iter.Val()).Result()
			if err != nil && !isNil(err) {
				return 0, err
			}
			n += c
		}
		if err := iter.Err(); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// usecDelta is the time in µs that cmd took on the primaries between two
// snapshots (INFO commandstats).
func usecDelta(before, after map[string]redisCounters, cmd string) int64 {
	var n int64
	for addr, a := range after {
		if b, ok := before[addr]; ok && b.runID == a.runID {
			n += a.usec[cmd] - b.usec[cmd]
		}
	}
	return n
}

// callsDelta is how many times cmd was called on the primaries between two
// snapshots (INFO commandstats).
func callsDelta(before, after map[string]redisCounters, cmd string) int64 {
	var n int64
	for addr, a := range after {
		if b, ok := before[addr]; ok && b.runID == a.runID {
			n += a.calls[cmd] - b.calls[cmd]
		}
	}
	return n
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// latencies turns what the streams recorded into milliseconds: every
// (post, reader) pair from the post's commit, the last reader of each post,
// every pair from the post's fan-out finished (finished, by post id), and
// each post's commit → fan-out finished.
func (s *sseClients) latencies(finished map[int64]feedWrite) (all, last, afterFeed, feedWritten []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, recv := range s.received {
		created := s.created[id]
		w, ok := finished[id]
		var latest time.Time
		for _, at := range recv {
			all = append(all, at.Sub(created))
			if at.After(latest) {
				latest = at
			}
			if ok {
				afterFeed = append(afterFeed, at.Sub(w.finished))
			}
		}
		last = append(last, latest.Sub(created))
		if ok {
			feedWritten = append(feedWritten, w.finished.Sub(w.created))
		}
	}
	slices.Sort(all)
	return all, last, afterFeed, feedWritten
}

// coverage is how many posts every one of n readers received, and how many
// any did.
func (s *sseClients) coverage(n int) (full, seen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, recv := range s.received {
		if len(recv) >= n {
			full++
		}
	}
	return full, len(s.received)
}
