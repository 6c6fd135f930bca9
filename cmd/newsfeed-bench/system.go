package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/app"
	"github.com/newsfeed/newsfeed/bench"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/internal/probe"
)

// benchOverrides are the keys the bench sets whatever the configuration
// says: it posts in bulk, so its servers limit no rate.
func benchOverrides() []app.FlagValue {
	return []app.FlagValue{
		{Key: "ratelimit.posts_per_minute", Value: 0, Flag: "newsfeed-bench"},
		{Key: "ratelimit.follows_per_minute", Value: 0, Flag: "newsfeed-bench"},
	}
}

// newsfeedBinary is the service binary whose processes the bench starts:
// path when given (--newsfeed), else newsfeed beside self, the bench's own
// executable (make bench builds both into bin/), else newsfeed on PATH.
func newsfeedBinary(path, self string) (string, error) {
	if path != "" {
		return path, nil
	}
	if self != "" {
		beside := filepath.Join(filepath.Dir(self), "newsfeed")
		if fi, err := os.Stat(beside); err == nil && !fi.IsDir() {
			return beside, nil
		}
	}
	if found, err := exec.LookPath("newsfeed"); err == nil {
		return found, nil
	}
	return "", errors.New("--newsfeed: no newsfeed binary beside this one nor on PATH: build it (make build) or name it with --newsfeed")
}

// freshBenchDatabase makes the bench's database afresh, migrated by
// `newsfeed migrate`, and returns its URL.
func freshBenchDatabase(ctx context.Context, cfg *app.Config, newsfeed string) (string, error) {
	dbURL, err := bench.FreshDatabase(ctx, cfg.Database.URL)
	if err != nil {
		return "", err
	}
	benchCfg := *cfg
	benchCfg.Database.URL = dbURL
	// No configuration file (whatever lies in the working directory): the
	// environment carries the whole of this one.
	cmd := exec.CommandContext(ctx, newsfeed, "--config=", "migrate")
	cmd.Env = workerEnv(os.Environ(), &benchCfg)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s migrate: %w: %s", newsfeed, err, strings.TrimSpace(string(out)))
	}
	return dbURL, nil
}

// inProcess is a system the bench runs in this process, as separate
// processes would run it: one app.System serves the API and dispatches, and
// every start of the workers opens a System of its own.
type inProcess struct {
	cfg    app.Config
	log    *zap.Logger
	secret []byte
}

// startInProcess runs every role in this process on the database dbURL and
// Redis keys under prefix: serve and dispatch together, the workers apart
// so that the big fan-out can move to a worker process of its own, started
// from the binary newsfeed.
func startInProcess(ctx context.Context, cfg *app.Config, newsfeed, dbURL, prefix string) (bench.Harness, func(), error) {
	p := &inProcess{cfg: *cfg}
	p.cfg.Database.URL = dbURL
	addr, err := probe.FreeAddr()
	if err != nil {
		return bench.Harness{}, nil, err
	}
	p.cfg.HTTP.Addr, p.cfg.Metrics.Addr = addr, ""
	p.cfg.Redis.Prefix = prefix
	p.cfg.Fanout.CelebrityThreshold = 1 << 60 // every author is fanned out
	p.cfg.Log.Level = "warn"
	p.cfg.ShutdownDrain = 0 // no load balancer to wait for
	if p.log, err = app.NewLogger(&p.cfg); err != nil {
		return bench.Harness{}, nil, err
	}
	front := []app.Role{app.RoleServe, app.RoleDispatch}
	sys, err := app.Open(ctx, &p.cfg, p.log, front...)
	if err != nil {
		return bench.Harness{}, nil, err
	}
	p.secret = make([]byte, 32)
	_, _ = rand.Read(p.secret)
	childEnv := workerEnv(os.Environ(), &p.cfg)
	closeSys := sys.Close
	if p.cfg.Redis.Cluster {
		// A cluster is shared: leave none of the bench's keys behind.
		closeSys = func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := bench.ClearPrefix(cctx, sys.Redis, prefix); err != nil {
				p.log.Warn("bench: Redis keys left on the cluster", zap.String("prefix", prefix), zap.Error(err))
			}
			sys.Close()
		}
	}
	roles := bench.Roles{
		Front:   func(ctx context.Context) error { return sys.Run(ctx, front, p.secret) },
		Workers: p.workers(true),
		Close:   closeSys,
	}
	if p.baselineComparable() {
		roles.WorkersWithoutLive = p.workers(false)
	}
	return bench.StartInProcess(ctx, bench.Harness{
		APIURL: "http://" + addr, Secret: p.secret, Pool: sys.Primary, Redis: sys.Redis, Prefix: prefix,
		WorkerCommand: func() (*exec.Cmd, error) {
			//nolint:gosec,noctx // the newsfeed binary; the bench supervises and stops it itself
			c := exec.Command(newsfeed, "--config=", "work")
			c.Env = childEnv
			return c, nil
		},
	}, roles)
}

// workers runs the work role in a System of its own until ctx ends; with
// live false, the same fan-out workers without the live path (the live
// stage's baseline). A failure is logged: the bench reports no role's.
func (p *inProcess) workers(live bool) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		err := p.runWorkers(ctx, live)
		if err != nil && ctx.Err() == nil {
			p.log.Error("bench: the in-process workers stopped", zap.Bool("live", live), zap.Error(err))
		}
		return err
	}
}

func (p *inProcess) runWorkers(ctx context.Context, live bool) error {
	sys, err := app.Open(ctx, &p.cfg, p.log, app.RoleWork)
	if err != nil {
		return err
	}
	defer sys.Close()
	if live {
		return sys.Run(ctx, []app.Role{app.RoleWork}, p.secret)
	}
	if err := sys.Queue.EnsureGroup(ctx); err != nil {
		return fmt.Errorf("work: %w", err)
	}
	w, err := fanout.New(sys.Store, sys.Feeds, sys.Store, sys.Queue, baselineConfig(&p.cfg, p.log))
	if err != nil {
		return fmt.Errorf("work: %w", err)
	}
	return w.Run(ctx)
}

// baselineComparable says whether the baseline workers fan out as the work
// role does but for the live path. They write with System.Feeds, which
// waits for no replica, and trace nothing: with redis.wait_replicas or
// tracing.endpoint set the live stage has no baseline (it says so).
func (p *inProcess) baselineComparable() bool {
	return p.cfg.Redis.WaitReplicas == 0 && p.cfg.Tracing.Endpoint == ""
}

// baselineConfig is the work role's fanout.Config (app's workRole) without
// the live path: the same keys, no Live. Its metrics are unregistered ones
// and no outage explains its errors: neither touches Redis.
// TestBaselineConfigSetsEveryField fails when fanout.Config gains a field
// this does not consider.
func baselineConfig(cfg *app.Config, log *zap.Logger) fanout.Config {
	return fanout.Config{
		Concurrency:     cfg.Fanout.Concurrency,
		PageSize:        cfg.Fanout.PageSize,
		ChunkSize:       cfg.Fanout.ChunkSize,
		ClaimIdle:       cfg.Queue.ClaimIdle,
		MaxDeliveries:   cfg.Queue.MaxDeliveries,
		MaxAttempts:     cfg.Outbox.MaxAttempts,
		Backoff:         backoff.Schedule{Base: cfg.Outbox.BackoffBase, Max: cfg.Outbox.BackoffMax},
		RedeliverAfter:  cfg.Outbox.RedeliverAfter,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          log.Named("work"),
	}
}

// checkClusterFlags: --redis-cluster compares redis.url's single Redis with
// a cluster, both run by the bench in process.
func checkClusterFlags(cfg *app.Config, apiURL string) error {
	if apiURL != "" {
		return errors.New("--redis-cluster runs the system in process; with --api the running processes use their own Redis")
	}
	if cfg.Redis.Cluster {
		return errors.New("--redis-cluster: redis.url must name a single Redis to compare the cluster with (redis.cluster is true)")
	}
	return nil
}

// clusterPartitions is the ticket queue's partitions on the bench's cluster
// when the configuration has fewer: 16 or more spread them over 3 shards.
const clusterPartitions = 16

// runOnCluster runs the fan-out and read stages on a system whose Redis is
// the cluster at clusterURL and PostgreSQL the database bench.Run seeded,
// and adds their lines to report.
func runOnCluster(ctx context.Context, cfg *app.Config, newsfeed, clusterURL string, opts bench.Options, progress io.Writer, report *bench.Report) error {
	clusterCfg := *cfg
	clusterCfg.Redis.URL, clusterCfg.Redis.Cluster = clusterURL, true
	clusterCfg.Queue.Partitions = max(clusterCfg.Queue.Partitions, clusterPartitions)
	dbURL, err := bench.DatabaseURL(cfg.Database.URL)
	if err != nil {
		return err
	}
	prefix, err := bench.ClusterPrefix(dbURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "starting the system on the Redis Cluster (keys under %q, %d queue partitions)\n", prefix, clusterCfg.Queue.Partitions)
	h, cleanup, err := startInProcess(ctx, &clusterCfg, newsfeed, dbURL, prefix)
	if err != nil {
		return fmt.Errorf("on the Redis Cluster: %w", err)
	}
	defer cleanup()
	return bench.RunOnCluster(ctx, h, opts, progress, report)
}

// externalConns is the bench's pool of PostgreSQL connections when it
// measures running processes: its load, not theirs.
const externalConns = 32

// connectExternal measures processes that already run: it connects to
// their PostgreSQL and Redis as they do (app.Open, no role run).
func connectExternal(ctx context.Context, cfg *app.Config, apiURL string) (bench.Harness, func(), error) {
	if cfg.Auth.Secret == "" {
		return bench.Harness{}, nil, errors.New("auth.secret: --api needs the secret the running serve uses")
	}
	connCfg := *cfg
	connCfg.Database.MaxConns = externalConns
	// The bench's own queries are not the system's to trace.
	connCfg.Tracing.Endpoint = ""
	// No role: Redis must answer.
	sys, err := app.Open(ctx, &connCfg, zap.NewNop())
	if err != nil {
		return bench.Harness{}, nil, err
	}
	return bench.Attach(ctx, bench.Harness{
		APIURL: apiURL, Secret: []byte(cfg.Auth.Secret), Pool: sys.Primary, Redis: sys.Redis, Prefix: cfg.Redis.Prefix,
	}, sys.Close)
}
