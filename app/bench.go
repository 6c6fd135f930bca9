package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/bench"
	"github.com/newsfeed/newsfeed/internal/probe"
	"github.com/newsfeed/newsfeed/store"
)

func benchCommand(load loadFunc) *cobra.Command {
	var opts bench.Options
	var million bool
	var out, apiURL, cpuProfile, clusterURL string
	var onCluster bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure every stage of the pipeline next to its limit (seeds a synthetic graph)",
		Long: `bench seeds a synthetic social graph and measures post creation, fan-out throughput
into fresh and into full feeds, delivery latency, one big fan-out, feed reads and the Redis
memory of full feeds, each next to its physical limit measured in the same run against the
same servers. By default it runs every role in this process
against a fresh database named after database.url with the suffix _bench and Redis keys
under "nfbench:". With --api it measures running serve/dispatch/work processes instead;
they must use database.url (an empty, migrated database: the bench seeds it), redis.url,
redis.prefix and auth.secret of this configuration. With --redis-cluster it then runs the
fan-out and read stages again on the Redis Cluster of --redis-cluster-url, each beside its
limit measured on the cluster. Every stage also reports what one unit of its work cost:
Redis CPU on every primary (INFO cpu, commandstats), PostgreSQL and this process's CPU.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if million {
				opts.BigFollowers = 1_000_000
			}
			var overrides []FlagValue
			if apiURL == "" {
				overrides = benchOverrides()
			}
			cfg, err := load(cmd, overrides)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if clusterURL != "" {
				if err := checkClusterFlags(cfg, apiURL); err != nil {
					return err
				}
			}
			var h bench.Harness
			var cleanup func()
			if apiURL == "" {
				var dbURL string
				if dbURL, err = freshBenchDatabase(ctx, cfg); err == nil {
					h, cleanup, err = startInProcess(ctx, cfg, dbURL, bench.Prefix)
				}
			} else {
				h, cleanup, err = connectExternal(ctx, cfg, apiURL)
			}
			if err != nil {
				return err
			}
			defer func() { cleanup() }()
			opts.PageSize, opts.MaxLen = cfg.Fanout.PageSize, cfg.Feed.MaxLen
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile) //nolint:gosec // the path the user gave --cpuprofile
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			report, err := bench.Run(ctx, h, opts, cmd.ErrOrStderr())
			if err == nil && clusterURL != "" {
				// The same stages on the cluster, one system after the other:
				// on two shared cores the idle one would still take its share.
				cleanup()
				cleanup = func() {}
				err = runOnCluster(ctx, cfg, clusterURL, opts, cmd.ErrOrStderr(), report)
			}
			if report != nil {
				fmt.Fprintln(cmd.OutOrStdout())
				report.WriteTable(cmd.OutOrStdout())
				if serr := report.Save(out); serr != nil {
					return fmt.Errorf("save results: %w", serr)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\nwritten: %s/%s\n", out, strings.Join(append([]string{"bench.json", "bench.md"}, report.Plots()...), ", "))
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Concurrency, "concurrency", 32, "closed-loop clients of the throughput stages (but reads)")
	f.IntVar(&opts.ReadClients, "read-clients", 64, "closed-loop clients of the read stage, each a reader")
	f.IntVar(&opts.Runs, "runs", 3, "measurements of each throughput stage (the median is reported)")
	f.DurationVar(&opts.StageTime, "stage-time", 3*time.Second, "length of one throughput measurement")
	f.DurationVar(&opts.LatencyTime, "latency-time", 5*time.Second, "length of each open-loop latency measurement")
	f.IntVar(&opts.BigFollowers, "big", 100_000, "followers of the big fan-out")
	f.IntVar(&opts.ChunkFollowers, "chunked", 200_000, "followers of the chunked fan-out done by one and by two worker processes")
	f.BoolVar(&million, "million", false, "big fan-out to 1,000,000 followers")
	f.IntVar(&opts.FanoutPosts, "fanout-posts", 1000, "posts (to 1,000 followers each) of the fan-out stage")
	f.StringVar(&out, "out", "bench-results", "directory for bench.json, bench.md and the latency plot")
	f.StringSliceVar(&opts.Stages, "stages", nil, "run only the stages whose names contain these words (e.g. fan-out,reads)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the roles in process and the load) to this file")
	f.StringVar(&apiURL, "api", "", "measure running processes behind this API URL instead of in-process roles")
	f.BoolVar(&onCluster, "redis-cluster", false, "run the fan-out and read stages again on the Redis Cluster of --redis-cluster-url, beside redis.url's single Redis")
	f.StringVar(&clusterURL, "redis-cluster-url", "", "seed nodes of the Redis Cluster for --redis-cluster (redis://h1:7000?addr=h2:7001; scripts/cluster.sh env prints one)")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		switch {
		case onCluster && clusterURL == "":
			return errors.New("--redis-cluster needs --redis-cluster-url, the cluster's seed nodes (eval \"$(scripts/cluster.sh env)\" sets NEWSFEED_TEST_REDIS_CLUSTER_URL to one)")
		case !onCluster && clusterURL != "":
			return errors.New("--redis-cluster-url is used with --redis-cluster")
		}
		return nil
	}
	return cmd
}

// benchOverrides are the keys the bench sets whatever the configuration
// says: it posts in bulk, so its servers limit no rate.
func benchOverrides() []FlagValue {
	return []FlagValue{
		{Key: "ratelimit.posts_per_minute", Value: 0, Flag: "newsfeed bench"},
		{Key: "ratelimit.follows_per_minute", Value: 0, Flag: "newsfeed bench"},
	}
}

// benchExecutable is the binary of the bench's worker processes; tests
// replace it.
var benchExecutable = os.Executable

// freshBenchDatabase makes the bench's database afresh, migrated, and
// returns its URL.
func freshBenchDatabase(ctx context.Context, cfg *Config) (string, error) {
	dbURL, err := bench.FreshDatabase(ctx, cfg.Database.URL)
	if err != nil {
		return "", err
	}
	benchCfg := *cfg
	benchCfg.Database.URL = dbURL
	if _, err := runMigrate(ctx, &benchCfg); err != nil {
		return "", err
	}
	return dbURL, nil
}

// startInProcess runs every role in this process on the database dbURL and
// Redis keys under prefix: serve and dispatch together, the workers apart
// so that the big fan-out can move to a worker process of its own.
func startInProcess(ctx context.Context, cfg *Config, dbURL, prefix string) (bench.Harness, func(), error) {
	benchCfg := *cfg
	benchCfg.Database.URL = dbURL
	addr, err := probe.FreeAddr()
	if err != nil {
		return bench.Harness{}, nil, err
	}
	benchCfg.HTTP.Addr, benchCfg.Metrics.Addr = addr, ""
	benchCfg.Redis.Prefix = prefix
	benchCfg.Fanout.CelebrityThreshold = 1 << 60 // every author is fanned out
	benchCfg.Log.Level = "warn"
	benchCfg.ShutdownDrain = 0 // no load balancer to wait for
	log, err := NewLogger(&benchCfg)
	if err != nil {
		return bench.Harness{}, nil, err
	}
	sys, err := Open(ctx, &benchCfg, log)
	if err != nil {
		return bench.Harness{}, nil, err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	childEnv := workerEnv(os.Environ(), &benchCfg)
	closeSys := sys.Close
	if benchCfg.Redis.Cluster {
		// A cluster is shared: leave none of the bench's keys behind.
		closeSys = func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := bench.ClearPrefix(cctx, sys.Redis, prefix); err != nil {
				log.Warn("bench: Redis keys left on the cluster", zap.String("prefix", prefix), zap.Error(err))
			}
			sys.Close()
		}
	}
	return bench.StartInProcess(ctx, bench.Harness{
		APIURL: "http://" + addr, Secret: secret, Pool: sys.Primary, Redis: sys.Redis, Prefix: prefix,
		WorkerCommand: func() (*exec.Cmd, error) {
			exe, err := benchExecutable()
			if err != nil {
				return nil, err
			}
			// No configuration file (whatever lies in the working directory):
			// the environment carries the whole of this one.
			//nolint:gosec,noctx // this very binary; the bench supervises and stops it itself
			c := exec.Command(exe, "--config=", "work")
			c.Env = childEnv
			return c, nil
		},
	}, bench.Roles{
		Front:   func(ctx context.Context) error { return sys.Run(ctx, []Role{RoleServe, RoleDispatch}, secret) },
		Workers: func(ctx context.Context) error { return sys.Run(ctx, []Role{RoleWork}, secret) },
		WorkersWithoutLive: func(ctx context.Context) error {
			return sys.runWithoutLive(ctx, []Role{RoleWork}, secret)
		},
		Close: closeSys,
	})
}

// checkClusterFlags: --redis-cluster compares redis.url's single Redis with
// a cluster, both run by the bench in process.
func checkClusterFlags(cfg *Config, apiURL string) error {
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
func runOnCluster(ctx context.Context, cfg *Config, clusterURL string, opts bench.Options, progress io.Writer, report *bench.Report) error {
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
	h, cleanup, err := startInProcess(ctx, &clusterCfg, dbURL, prefix)
	if err != nil {
		return fmt.Errorf("on the Redis Cluster: %w", err)
	}
	defer cleanup()
	return bench.RunOnCluster(ctx, h, opts, progress, report)
}

// connectExternal measures processes that already run.
func connectExternal(ctx context.Context, cfg *Config, apiURL string) (bench.Harness, func(), error) {
	if cfg.Auth.Secret == "" {
		return bench.Harness{}, nil, errors.New("auth.secret: --api needs the secret the running serve uses")
	}
	pool, err := store.Connect(ctx, cfg.Database.URL, 32, cfg.Database.ConnectWait)
	if err != nil {
		return bench.Harness{}, nil, fmt.Errorf("database.url: %w", err)
	}
	rdb, _, err := connectRedis(ctx, cfg, zap.NewNop(), false) // not optional: an error when it does not answer
	if err != nil {
		pool.Close()
		return bench.Harness{}, nil, err
	}
	return bench.Attach(ctx, bench.Harness{
		APIURL: apiURL, Secret: []byte(cfg.Auth.Secret), Pool: pool, Redis: rdb, Prefix: cfg.Redis.Prefix,
	}, func() {
		pool.Close()
		_ = rdb.Close()
	})
}
