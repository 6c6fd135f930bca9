// Package bench measures every stage of the pipeline next to its physical
// limit, both measured in the same run against the same servers: post
// creation against the same insert done straight with pgx, fan-out into
// fresh feeds and into full ones against raw pipelined ZADD into as many
// plain sorted sets (empty, or as full), and the fan-out of reposts against
// that of posts, delivery latency under an open-loop post rate, one big
// fan-out against raw ZADD of as many entries, feed reads against raw
// ZREVRANGEBYSCORE plus hydration, and reads of feeds with reposts and
// mutes against both (stage_filtered.go), what full
// feeds and cached posts cost in Redis memory against the same entries as
// plain sorted sets, and what live streams add to fan-out's Redis cost
// (nobody connected, every follower connected) against fan-out without
// them, with the latency to a connected reader (stage_live.go). The
// machine is shared and noisy, so every throughput is the median of several
// runs, every ratio is taken within one run, and the spread across the runs
// is reported. Beside the throughput each stage
// reports what a unit of its work cost (cost.go): Redis CPU on every
// primary, from INFO before and after, and PostgreSQL's and this process's
// CPU; RunOnCluster runs the fan-out and read stages again on a Redis
// Cluster.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/store"
)

// Options configure a run. Zero fields take the defaults named.
type Options struct {
	// Concurrency is the closed-loop clients of the throughput stages. Defaults to 32.
	Concurrency int
	// StageTime is how long each throughput measurement runs. Defaults to 3s.
	StageTime time.Duration
	// Runs is how many times each throughput stage is measured (median). Defaults to 3.
	Runs int
	// BigFollowers is the follower count of the big fan-out. Defaults to 100,000.
	BigFollowers int
	// ChunkFollowers is the follower count of the chunked fan-out done by one
	// and then two worker processes. Defaults to 200,000.
	ChunkFollowers int
	// FanoutPosts is the posts of the fan-out stage, to 1,000 followers each. Defaults to 1,000.
	FanoutPosts int
	// LatencyTime is how long each open-loop latency measurement runs. Defaults to 5s.
	LatencyTime time.Duration
	// Readers is how many users the read stage reads as. Defaults to 64.
	Readers int
	// ReadClients is the closed-loop clients of the read stage, each a reader
	// reading page after page. Defaults to 64.
	ReadClients int
	// PageSize is the fan-out's pipeline size, used for the raw ZADD limit. Defaults to 1000.
	PageSize int
	// MaxLen is feed.max_len. Defaults to 800.
	MaxLen int
	// Stages, when not empty, runs only the stages whose names contain one
	// of these words (for profiling one stage).
	Stages []string
}

func (o *Options) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Concurrency, 32)
	def(&o.Runs, 3)
	def(&o.BigFollowers, 100_000)
	def(&o.ChunkFollowers, 200_000)
	def(&o.FanoutPosts, 1000)
	def(&o.Readers, 64)
	def(&o.ReadClients, 64)
	def(&o.PageSize, 1000)
	def(&o.MaxLen, 800)
	if o.StageTime <= 0 {
		o.StageTime = 3 * time.Second
	}
	if o.LatencyTime <= 0 {
		o.LatencyTime = 5 * time.Second
	}
}

type runner struct {
	opts     Options
	h        Harness
	pool     *pgxpool.Pool
	db       *store.DB
	rdb      redis.UniversalClient
	http     *http.Client
	progress io.Writer
	tokens   sync.Map
	report   *Report
	// ownWorkers is set once the in-process workers are stopped for worker
	// processes of the bench's own.
	ownWorkers bool
	// workers counts the worker processes started, to name them.
	workers int
	// redisLabel names the Redis the stages run on ("single", "cluster,
	// 3 primaries"), and nameSuffix follows their names on a cluster.
	redisLabel, nameSuffix string
	// withReposts and withFiltered are set when the repost fan-out and the
	// filtered reads are selected: the fan-out and read stages then measure
	// them in their own runs, and repostsDone and filteredDone say so once
	// they have (repostFanout, filteredReads).
	withReposts, withFiltered bool
	repostsDone, filteredDone bool
	// filtered is the filtered-read scenario, once seeded.
	filtered *filteredScenario
	// watch is the connection of the bench's own polling (drain): the cost
	// table leaves its backend's CPU out of PostgreSQL's.
	watch watchConn
}

// The stages measured inside others' runs (stage_reposts.go,
// stage_filtered.go): their names, which --stages matches.
const (
	repostFanoutStage  = "repost fan-out"
	filteredReadsStage = "filtered reads (reposts, mutes)"
)

// stopInProcessWorkers stops the in-process workers, once, and reports
// whether the bench can run worker processes of its own.
func (r *runner) stopInProcessWorkers() bool {
	if r.h.StopWorkers == nil || r.h.WorkerCommand == nil {
		return false
	}
	if !r.ownWorkers {
		r.h.StopWorkers()
		r.ownWorkers = true
	}
	return true
}

// Run seeds the graph, runs every stage and returns the report. A worker
// process that exits before its stage ends fails the stage with the way it
// exited and the last lines of its stderr.
func Run(ctx context.Context, h Harness, opts Options, progress io.Writer) (*Report, error) {
	opts.setDefaults()
	r, err := newRunner(ctx, h, opts, progress, newReport(opts))
	if err != nil {
		return nil, err
	}
	defer r.closeWatch()
	r.withReposts, r.withFiltered = selected(repostFanoutStage, opts.Stages), selected(filteredReadsStage, opts.Stages)
	fmt.Fprintln(r.progress, "seeding the graph")
	if err := r.seed(ctx); err != nil {
		return nil, err
	}
	return r.report, r.stages(ctx, []stage{
		{"post creation", r.postCreation},
		{"follows", r.follows},
		{"fan-out throughput", r.fanoutThroughput},
		{repostFanoutStage, r.repostFanout},
		{"fan-out at full feeds", r.fanoutFullFeeds},
		{"memory at full feeds", r.memoryAtFullFeeds},
		{"delivery latency", r.deliveryLatency},
		{"feed reads", r.feedReads},
		{filteredReadsStage, r.filteredReads},
		{"live streams", r.liveStreams},
		{"big fan-out", r.bigFanout},
		{"chunked fan-out, 1 and 2 workers", r.chunkedFanout},
		{"inactive followers", r.inactiveFollowers},
		{"readers who follow many", r.followingMany},
	})
}

// RunOnCluster runs the fan-out stages (fresh and full feeds) and the
// feed-read stage (those of opts.Stages among them) again on h, a system
// whose Redis is a cluster, on the database that Run seeded, and adds their
// lines to report beside those of Run's Redis. Each stage's limit is
// measured on the cluster too.
func RunOnCluster(ctx context.Context, h Harness, opts Options, progress io.Writer, report *Report) error {
	opts.setDefaults()
	r, err := newRunner(ctx, h, opts, progress, report)
	if err != nil {
		return err
	}
	defer r.closeWatch()
	r.nameSuffix = ", cluster"
	users := make([]int64, 1000) // the fan-out stage's followers
	for i := range users {
		users[i] = int64(FollowerBase + i)
	}
	if report.ClusterSlots, err = clusterSlots(ctx, h.Redis); err != nil {
		return err
	}
	fmt.Fprintf(r.progress, "on the Redis Cluster (%s; slots per primary: %s): building the fan-out stage's feeds\n",
		r.redisLabel, report.ClusterSlots)
	if err := r.seedFeeds(ctx, users); err != nil {
		return err
	}
	return r.stages(ctx, []stage{
		{"fan-out throughput, cluster", r.fanoutThroughput},
		{"fan-out at full feeds, cluster", r.fanoutFullFeeds},
		{"feed reads, cluster", r.feedReads},
	})
}

func newRunner(ctx context.Context, h Harness, opts Options, progress io.Writer, report *Report) (*runner, error) {
	progress = &lockedWriter{w: progress} // the workers' stderr goes there too
	r := &runner{
		opts: opts, h: h, pool: h.Pool, db: store.New(h.Pool, nil), rdb: h.Redis, progress: progress,
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 4 * max(opts.Concurrency, opts.ReadClients), MaxIdleConnsPerHost: 4 * max(opts.Concurrency, opts.ReadClients),
		}},
		report: report, redisLabel: "single",
	}
	if _, ok := h.Redis.(*redis.ClusterClient); ok {
		nodes, err := primaries(ctx, h.Redis)
		if err != nil {
			return nil, fmt.Errorf("redis cluster: %w", err)
		}
		r.redisLabel = fmt.Sprintf("cluster, %d primaries", len(nodes))
	}
	return r, nil
}

// clusterSlots says how many hash slots each primary holds now.
func clusterSlots(ctx context.Context, rdb redis.UniversalClient) (SlotCounts, error) {
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	counts := map[string]int{}
	for _, s := range slots {
		if len(s.Nodes) > 0 {
			counts[s.Nodes[0].Addr] += s.End - s.Start + 1
		}
	}
	out := make(SlotCounts, 0, len(counts))
	for a, n := range counts {
		out = append(out, PrimarySlots{Addr: a, Slots: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// PrimarySlots is how many of the 16,384 hash slots a primary holds.
type PrimarySlots struct {
	Addr  string `json:"addr"`
	Slots int    `json:"slots"`
}

// SlotCounts is the slots of every primary of a cluster.
type SlotCounts []PrimarySlots

func (s SlotCounts) String() string {
	parts := make([]string, len(s))
	for i, p := range s {
		parts[i] = fmt.Sprintf("%s %d", p.Addr, p.Slots)
	}
	return strings.Join(parts, ", ")
}

type stage struct {
	name string
	fn   func(context.Context) error
}

// stages runs those of opts.Stages, one after the other.
func (r *runner) stages(ctx context.Context, all []stage) error {
	for _, s := range all {
		if !selected(s.name, r.opts.Stages) {
			continue
		}
		fmt.Fprintf(r.progress, "stage: %s\n", s.name)
		if err := runStage(ctx, s.fn); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// stageFailure is how startWorker reaches the stage it serves.
type stageFailure struct{}

// runStage runs one stage with a context that a worker process's exit
// cancels; the stage's error is then the worker's.
func runStage(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	err := fn(context.WithValue(ctx, stageFailure{}, cancel))
	var exit *ExitError
	if cause := context.Cause(ctx); errors.As(cause, &exit) {
		return exit // whatever the stage saw next (context canceled) follows from it
	}
	return err
}

// startWorker starts a worker process for the stage of ctx, which ends with
// the process's error if it exits before the stage stops it. The caller
// stops it (Stop) before the stage returns.
func (r *runner) startWorker(ctx context.Context) (*Process, error) {
	cmd, err := r.h.WorkerCommand()
	if err != nil {
		return nil, fmt.Errorf("worker process: %w", err)
	}
	r.workers++
	p, err := StartProcess(fmt.Sprintf("worker %d", r.workers), cmd, r.progress)
	if err != nil {
		return nil, err
	}
	fail, _ := ctx.Value(stageFailure{}).(context.CancelCauseFunc)
	go func() {
		select {
		case <-p.Done():
			if err := p.Err(); err != nil && fail != nil {
				fail(err)
			}
		case <-ctx.Done():
		}
	}()
	return p, nil
}

func selected(name string, only []string) bool {
	if len(only) == 0 {
		return true
	}
	for _, w := range only {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}
