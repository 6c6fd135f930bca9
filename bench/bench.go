// Package bench measures every stage of the pipeline next to its physical
// limit, both measured in the same run against the same servers: post
// creation against the same insert done straight with pgx, fan-out against
// raw pipelined ZADD, delivery latency under an open-loop post rate, one big
// fan-out against raw ZADD of as many entries, and feed reads against raw
// ZREVRANGEBYSCORE plus hydration. The machine is shared and noisy, so every
// throughput is the median of several runs and every ratio is taken within
// one run.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/domain"
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
	def(&o.PageSize, 1000)
	def(&o.MaxLen, 800)
	if o.StageTime <= 0 {
		o.StageTime = 3 * time.Second
	}
	if o.LatencyTime <= 0 {
		o.LatencyTime = 5 * time.Second
	}
}

// Harness is the system under test, as the caller started it.
type Harness struct {
	// APIURL is the base URL of a serve process (or the in-process API).
	APIURL string
	// Secret signs the bench's bearer tokens.
	Secret []byte
	// Pool is the PostgreSQL the system uses; the bench seeds it.
	Pool *pgxpool.Pool
	// Redis is the Redis the system uses, and Prefix its key prefix.
	Redis  redis.UniversalClient
	Prefix string
	// StopWorkers stops the in-process workers so that the big fan-out can
	// run in a worker process of its own, whose memory is measured. Nil when
	// the workers are not in process: the big fan-out then runs on them and
	// memory is not reported.
	StopWorkers func()
	// WorkerCommand is the command of one `newsfeed work` process, not yet
	// started (and with Stderr unset): the bench starts it, watches it, and
	// fails the stage it serves if it exits before the stage ends.
	WorkerCommand func() (*exec.Cmd, error)
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
}

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
	progress = &lockedWriter{w: progress} // the workers' stderr goes there too
	r := &runner{
		opts: opts, h: h, pool: h.Pool, db: store.New(h.Pool, nil), rdb: h.Redis, progress: progress,
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 4 * opts.Concurrency, MaxIdleConnsPerHost: 4 * opts.Concurrency,
		}},
		report: newReport(opts),
	}
	fmt.Fprintln(progress, "seeding the graph")
	if err := r.seed(ctx); err != nil {
		return nil, err
	}
	stages := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"post creation", r.postCreation},
		{"fan-out throughput", r.fanoutThroughput},
		{"delivery latency", r.deliveryLatency},
		{"feed reads", r.feedReads},
		{"big fan-out", r.bigFanout},
		{"chunked fan-out, 1 and 2 workers", r.chunkedFanout},
		{"inactive followers", r.inactiveFollowers},
	}
	for _, s := range stages {
		if !selected(s.name, opts.Stages) {
			continue
		}
		fmt.Fprintf(progress, "stage: %s\n", s.name)
		if err := runStage(ctx, s.fn); err != nil {
			return r.report, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return r.report, nil
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

func (r *runner) feedKey(user int64) string {
	return r.h.Prefix + "feed:{" + strconv.FormatInt(user, 10) + "}"
}

func (r *runner) token(user int64) string {
	if t, ok := r.tokens.Load(user); ok {
		return t.(string)
	}
	t, _ := api.IssueToken(r.h.Secret, user, 24*time.Hour)
	r.tokens.Store(user, t)
	return t
}

// post creates a post through the API.
func (r *runner) post(ctx context.Context, author int64) error {
	req, err := http.NewRequestWithContext(ctx, "POST", r.h.APIURL+"/v1/posts",
		strings.NewReader(`{"body":"bench post"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.token(author))
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST /v1/posts: %s", resp.Status)
	}
	return nil
}

// readFeed reads a first feed page through the API.
func (r *runner) readFeed(ctx context.Context, user int64) error {
	req, err := http.NewRequestWithContext(ctx, "GET", r.h.APIURL+"/v1/feed?limit=20", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.token(user))
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var page struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || len(page.Items) == 0 {
		return fmt.Errorf("GET /v1/feed: %s with %d items", resp.Status, len(page.Items))
	}
	return nil
}

// closedLoop runs fn from n clients for d and returns operations per second
// and each operation's latency. Each client sends its next request when the
// last one returned.
func closedLoop(ctx context.Context, n int, d time.Duration, fn func(ctx context.Context, client, i int) error) (float64, []time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; ctx.Err() == nil; i++ {
				t := time.Now()
				if err := fn(ctx, c, i); err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
					}
					break
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(len(all)) / time.Since(start).Seconds(), all, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// postCreation: POST /v1/posts against the same insert (post + outbox row,
// one transaction) done straight with pgx, at the same concurrency.
func (r *runner) postCreation(ctx context.Context) error {
	var ours, limit, ratios []float64
	var lat []time.Duration
	for run := range r.opts.Runs {
		l, _, err := closedLoop(ctx, r.opts.Concurrency, r.opts.StageTime, func(ctx context.Context, c, i int) error {
			_, _, err := r.db.CreatePost(ctx, int64(quietBase+(c+i)%quietN), "bench post", "")
			return err
		})
		if err != nil {
			return fmt.Errorf("limit: %w", err)
		}
		o, samples, err := closedLoop(ctx, r.opts.Concurrency, r.opts.StageTime, func(ctx context.Context, c, i int) error {
			return r.post(ctx, int64(quietBase+(c+i)%quietN))
		})
		if err != nil {
			return err
		}
		ours, limit, ratios, lat = append(ours, o), append(limit, l), append(ratios, o/l), append(lat, samples...)
		fmt.Fprintf(r.progress, "  run %d: API %.0f posts/s, pgx %.0f posts/s\n", run+1, o, l)
	}
	r.report.add(Stage{
		Name: "post creation", Unit: "posts/s", Ours: median(ours), Limit: median(limit), Ratio: median(ratios),
		Target: "≥ 0.6", Latency: percentiles(lat),
		Note: fmt.Sprintf("POST /v1/posts vs the same insert with pgx, %d clients", r.opts.Concurrency),
	})
	return r.drain(ctx, 2*time.Minute)
}

// drain waits until the outbox has nothing unfinished.
func (r *runner) drain(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var open int
		if err := r.pool.QueryRow(ctx,
			`SELECT count(*) FROM outbox WHERE status IN ('pending','publishing','published')`).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outbox not drained after %s: %d open", timeout, open)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (r *runner) lastOutboxID(ctx context.Context) (int64, error) {
	var id int64
	err := r.pool.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM outbox`).Scan(&id)
	return id, err
}

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

// rawZADD writes n entries with plain pipelined ZADD, PageSize per pipeline,
// from clients goroutines, spread over as many throw-away sorted sets as the
// fan-out it stands for writes feeds, and returns how long the writes took
// (the clean-up after is not timed).
func (r *runner) rawZADD(ctx context.Context, n, keys, clients int) (time.Duration, error) {
	pages := (n + r.opts.PageSize - 1) / r.opts.PageSize
	key := func(i int) string { return r.h.Prefix + "raw:{" + strconv.Itoa(i) + "}" }
	var next atomic.Int64
	var wg sync.WaitGroup
	var zerr atomic.Value
	member := rand.Int64N(1 << 40)
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := next.Add(1) - 1; p < int64(pages); p = next.Add(1) - 1 {
				_, err := r.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
					for i := range r.opts.PageSize {
						pipe.ZAdd(ctx, key((int(p)*r.opts.PageSize+i)%keys), redis.Z{Score: float64(member + p), Member: member + p})
					}
					return nil
				})
				if err != nil {
					zerr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := zerr.Load().(error); err != nil {
		return 0, fmt.Errorf("raw ZADD: %w", err)
	}
	for s := 0; s < keys; s += 1000 {
		if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := s; i < min(s+1000, keys); i++ {
				p.Unlink(ctx, key(i))
			}
			return nil
		}); err != nil {
			return 0, err
		}
	}
	return elapsed, nil
}

// deliveryLatency: post committed → fan-out finished, both on the database
// clock, under a fixed arrival rate (open loop: a late post does not delay
// the next one).
func (r *runner) deliveryLatency(ctx context.Context) error {
	classes := []struct {
		author    int64
		followers int
		rate      int
	}{{author100, 100, 100}, {author1k, 1000, 100}, {author10k, 10_000, 10}}
	for _, c := range classes {
		after, err := r.lastOutboxID(ctx)
		if err != nil {
			return err
		}
		interval := time.Second / time.Duration(c.rate)
		tick := time.NewTicker(interval)
		deadline := time.Now().Add(r.opts.LatencyTime)
		var wg sync.WaitGroup
		var postErr atomic.Value
		sent := 0
		for time.Now().Before(deadline) {
			<-tick.C
			wg.Add(1)
			sent++
			go func() {
				defer wg.Done()
				if err := r.post(ctx, c.author); err != nil {
					postErr.Store(err)
				}
			}()
		}
		tick.Stop()
		wg.Wait()
		if err, _ := postErr.Load().(error); err != nil {
			return err
		}
		if err := r.drain(ctx, 5*time.Minute); err != nil {
			return err
		}
		rows, err := r.pool.Query(ctx, `SELECT extract(epoch FROM finished_at - created_at)::float8 FROM outbox
			WHERE id > $1 AND event_type = 'post.created' AND status = 'done'`, after)
		if err != nil {
			return err
		}
		var lat []time.Duration
		for rows.Next() {
			var s float64
			if err := rows.Scan(&s); err != nil {
				return err
			}
			lat = append(lat, time.Duration(s*float64(time.Second)))
		}
		if err := rows.Err(); err != nil {
			return err
		}
		raw, err := r.rawOnePost(ctx, c.followers)
		if err != nil {
			return err
		}
		p := percentiles(lat)
		target := ""
		if c.followers == 1000 {
			target = "p99 ≤ 250 ms"
		}
		name := fmt.Sprintf("delivery, %s followers at %d posts/s", humanInt(c.followers), c.rate)
		r.report.add(Stage{
			Name: name, Unit: "ms (p50)", Ours: p.P50, Limit: float64(raw) / float64(time.Millisecond),
			Ratio: p.P50 / (float64(raw) / float64(time.Millisecond)), Target: target, Latency: p,
			Note: fmt.Sprintf("%d posts in %s, open loop; limit: raw ZADD of one post's entries", sent, r.opts.LatencyTime),
		})
		r.report.LatencySamples[name] = msSamples(lat)
		fmt.Fprintf(r.progress, "  %s: p50 %.1f ms, p95 %.1f ms, p99 %.1f ms (%d posts)\n", name, p.P50, p.P95, p.P99, len(lat))
	}
	return nil
}

// rawOnePost is the time to write one post's entries for n followers with
// raw pipelined ZADD, one pipeline after the other, as one fan-out does.
func (r *runner) rawOnePost(ctx context.Context, n int) (time.Duration, error) {
	return r.rawZADD(ctx, n, n, 1)
}

// feedReads: GET /v1/feed against raw ZREVRANGEBYSCORE + hydration from Go.
func (r *runner) feedReads(ctx context.Context) error {
	for i := range r.opts.Readers { // first reads build the feeds and warm the post cache
		if err := r.readFeed(ctx, int64(readerBase+i)); err != nil {
			return err
		}
	}
	var ours, limit, ratios []float64
	var lat, rawLat []time.Duration
	for run := range r.opts.Runs {
		l, ls, err := closedLoop(ctx, r.opts.Concurrency, r.opts.StageTime, func(ctx context.Context, c, i int) error {
			return r.rawRead(ctx, int64(readerBase+rand.IntN(r.opts.Readers)))
		})
		if err != nil {
			return fmt.Errorf("limit: %w", err)
		}
		o, samples, err := closedLoop(ctx, r.opts.Concurrency, r.opts.StageTime, func(ctx context.Context, c, i int) error {
			return r.readFeed(ctx, int64(readerBase+rand.IntN(r.opts.Readers)))
		})
		if err != nil {
			return err
		}
		ours, limit, ratios = append(ours, o), append(limit, l), append(ratios, o/l)
		lat, rawLat = append(lat, samples...), append(rawLat, ls...)
		fmt.Fprintf(r.progress, "  run %d: GET /v1/feed %.0f reads/s, raw %.0f reads/s\n", run+1, o, l)
	}
	p := percentiles(lat)
	r.report.add(Stage{
		Name: "feed reads", Unit: "reads/s", Ours: median(ours), Limit: median(limit), Ratio: median(ratios),
		Target: "≥ 0.5, p99 ≤ 20 ms", Latency: p,
		Note: fmt.Sprintf("%d clients, 20 posts a page; limit p99 %.1f ms", r.opts.Concurrency, percentiles(rawLat).P99),
	})
	return nil
}

// rawRead is a feed page done by hand: the ids, then the cached posts.
func (r *runner) rawRead(ctx context.Context, user int64) error {
	ids, err := r.rdb.ZRevRangeByScore(ctx, r.feedKey(user), &redis.ZRangeBy{Max: "+inf", Min: "(0", Count: 21}).Result()
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

// bigFanout: one post to BigFollowers followers, post committed → fan-out
// finished, against raw pipelined ZADD of as many entries; and the peak
// memory of the worker process that did it.
func (r *runner) bigFanout(ctx context.Context) error {
	var proc *Process
	if r.stopInProcessWorkers() {
		var err error
		if proc, err = r.startWorker(ctx); err != nil {
			return err
		}
		defer proc.Stop()
	}
	fmt.Fprintf(r.progress, "  one post to %s followers…\n", humanInt(r.opts.BigFollowers))
	took, err := r.timeOnePost(ctx, authorBig)
	if err != nil {
		return err
	}
	var peakRSS float64
	if proc != nil {
		peakRSS = vmHWM(proc.Pid())
	}
	raw, err := r.rawOnePost(ctx, r.opts.BigFollowers)
	if err != nil {
		return err
	}
	note := fmt.Sprintf("one post to %s followers; limit: raw ZADD of as many entries, pipelines of %d",
		humanInt(r.opts.BigFollowers), r.opts.PageSize)
	if peakRSS > 0 {
		note += fmt.Sprintf("; worker peak RSS %.0f MB", peakRSS)
		r.report.WorkerPeakRSSMB = peakRSS
	}
	r.report.add(Stage{
		Name: "big fan-out", Unit: "s", Ours: took.Seconds(), Limit: raw.Seconds(), Ratio: took.Seconds() / raw.Seconds(),
		Target: "≤ 1.5× (time)", Note: note,
	})
	return nil
}

// timeOnePost posts once as author and returns the time from the post's
// commit to the end of its fan-out (chunks included), on the database clock.
func (r *runner) timeOnePost(ctx context.Context, author int64) (time.Duration, error) {
	after, err := r.lastOutboxID(ctx)
	if err != nil {
		return 0, err
	}
	if err := r.post(ctx, author); err != nil {
		return 0, err
	}
	for {
		var status string
		var secs float64
		err := r.pool.QueryRow(ctx, `SELECT status, COALESCE(extract(epoch FROM finished_at - created_at)::float8, 0)
			FROM outbox WHERE id > $1 AND event_type = 'post.created' ORDER BY id LIMIT 1`, after).Scan(&status, &secs)
		if err != nil {
			return 0, err
		}
		switch status {
		case "done":
			return time.Duration(secs * float64(time.Second)), nil
		case "dead":
			return 0, errors.New("the fan-out died")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// chunkedFanout: one post to ChunkFollowers followers, split into chunks
// (fanout.chunk_size), done by one worker process and then by two.
func (r *runner) chunkedFanout(ctx context.Context) error {
	if !r.stopInProcessWorkers() {
		fmt.Fprintln(r.progress, "  skipped: needs worker processes of its own (not with --api)")
		return nil
	}
	var took []time.Duration
	var procs []*Process
	defer func() {
		for _, p := range procs {
			p.Stop()
		}
	}()
	for workers := 1; workers <= 2; workers++ {
		p, err := r.startWorker(ctx)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		d, err := r.timeOnePost(ctx, authorWide)
		if err != nil {
			return err
		}
		took = append(took, d)
		fmt.Fprintf(r.progress, "  %d worker process(es): %s\n", workers, d.Round(time.Millisecond))
	}
	r.report.add(Stage{
		Name: "chunked fan-out, 2 workers vs 1", Unit: "s", Ours: took[1].Seconds(), Limit: took[0].Seconds(),
		Ratio: took[1].Seconds() / took[0].Seconds(), Target: "< 1 where cores allow",
		Note: fmt.Sprintf("one post to %s followers in chunks; limit column: the same with one worker process; %d CPUs shared with PostgreSQL, Redis and the load",
			humanInt(r.opts.ChunkFollowers), runtime.NumCPU()),
	})
	return nil
}

// inactiveFollowers: one post to an author's 20,000 followers, half of whom
// have been away past feed.active_days (their feeds expired): the work and
// Redis memory that skipping them saves.
func (r *runner) inactiveFollowers(ctx context.Context) error {
	if r.ownWorkers { // the in-process workers were stopped: bring one
		p, err := r.startWorker(ctx)
		if err != nil {
			return err
		}
		defer p.Stop()
	}
	if _, err := r.timeOnePost(ctx, authorAway); err != nil {
		return err
	}
	users := make([]int64, awayFollowers)
	for i := range users {
		users[i] = int64(awayBase + i)
	}
	written, feeds, bytes := 0, 0, int64(0)
	for start := 0; start < len(users); start += 1000 {
		batch := users[start:min(start+1000, len(users))]
		cards := make([]*redis.IntCmd, len(batch))
		mem := make([]*redis.IntCmd, len(batch))
		if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, u := range batch {
				cards[i] = p.ZCount(ctx, r.feedKey(u), "1", "+inf") // post ids, not markers
				mem[i] = p.MemoryUsage(ctx, r.feedKey(u))
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i := range batch {
			if m := mem[i].Val(); m > 0 { // the feed exists
				feeds++
				written += int(cards[i].Val())
				bytes += m
			}
		}
	}
	perFeed := float64(bytes) / float64(max(feeds, 1))
	saved := float64(awayFollowers-feeds) * perFeed
	// A feed that has filled up (a reader of the read stage) costs more.
	full := float64(r.rdb.MemoryUsage(ctx, r.feedKey(readerBase)).Val())
	r.report.add(Stage{
		Name: "inactive followers skipped", Unit: "entries", Ours: float64(written), Limit: float64(awayFollowers),
		Ratio: float64(written) / float64(awayFollowers), Target: "work ∝ active followers",
		Note: fmt.Sprintf("one post to %s followers, half away: %d entries written, %d feeds in Redis (%.0f B each here), "+
			"%.1f MB not kept for the %d away — %.1f MB at %.0f KB for a feed filled to feed.max_len",
			humanInt(awayFollowers), written, feeds, perFeed, saved/1e6, awayFollowers-feeds,
			float64(awayFollowers-feeds)*full/1e6, full/1e3),
	})
	fmt.Fprintf(r.progress, "  %d of %d followers written; %.1f MB of feeds not kept\n", written, awayFollowers, saved/1e6)
	return nil
}

// vmHWM is the peak resident set of a process in MB, from /proc.
func vmHWM(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
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

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func humanInt(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}
