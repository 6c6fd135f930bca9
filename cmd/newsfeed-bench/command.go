package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/newsfeed/newsfeed/app"
	"github.com/newsfeed/newsfeed/bench"
)

// newCommand builds the newsfeed-bench command.
func newCommand() *cobra.Command {
	var opts bench.Options
	var million bool
	var configPath, newsfeedPath, out, apiURL, cpuProfile, clusterURL string
	var onCluster bool
	cmd := &cobra.Command{
		Use:   "newsfeed-bench",
		Short: "Measure every stage of newsfeed's pipeline next to its limit (seeds a synthetic graph)",
		Long: `newsfeed-bench seeds a synthetic social graph and measures post creation, fan-out
throughput into fresh and into full feeds, delivery latency, one big fan-out, feed reads and
the Redis memory of full feeds, each next to its physical limit measured in the same run
against the same servers; the fan-out of reposts beside that of posts, and reads of feeds
with reposts and mutes beside the plain reads, each in the same runs. It reads the configuration as newsfeed does (--config, NEWSFEED_*).
By default it runs every role in this process against a fresh database named after
database.url with the suffix _bench (migrated by newsfeed migrate) and Redis keys under
"nfbench:", and starts newsfeed work processes for the big and chunked fan-outs: the
newsfeed binary is --newsfeed, else the one beside this binary (make bench builds both),
else newsfeed on PATH. With --api it measures running serve/dispatch/work processes
instead; they must use database.url (an empty, migrated database: the bench seeds it),
redis.url, redis.prefix and auth.secret of this configuration. With --redis-cluster it
then runs the fan-out and read stages again on the Redis Cluster of --redis-cluster-url,
each beside its limit measured on the cluster. Every stage also reports what one unit of
its work cost: Redis CPU on every primary (INFO cpu, commandstats), PostgreSQL and this
process's CPU.`,
		Args:          cobra.NoArgs,
		SilenceErrors: true, // main prints the one line
		SilenceUsage:  true,
		PreRunE: func(*cobra.Command, []string) error {
			switch {
			case onCluster && clusterURL == "":
				return errors.New("--redis-cluster needs --redis-cluster-url, the cluster's seed nodes (eval \"$(scripts/cluster.sh env)\" sets NEWSFEED_TEST_REDIS_CLUSTER_URL to one)")
			case !onCluster && clusterURL != "":
				return errors.New("--redis-cluster-url is used with --redis-cluster")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if million {
				opts.BigFollowers = 1_000_000
			}
			var overrides []app.FlagValue
			if apiURL == "" {
				overrides = benchOverrides()
			}
			cfg, err := app.LoadConfig(app.ConfigSources{
				File: configPath, FileRequired: cmd.Flags().Changed("config"), Environ: os.Environ(), Flags: overrides,
			})
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
			var newsfeed string
			if apiURL == "" {
				var dbURL string
				self, _ := os.Executable() // "" when unknown: PATH then
				if newsfeed, err = newsfeedBinary(newsfeedPath, self); err == nil {
					dbURL, err = freshBenchDatabase(ctx, cfg, newsfeed)
				}
				if err == nil {
					h, cleanup, err = startInProcess(ctx, cfg, newsfeed, dbURL, bench.Prefix)
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
				err = runOnCluster(ctx, cfg, newsfeed, clusterURL, opts, cmd.ErrOrStderr(), report)
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
	f.StringVar(&configPath, "config", "config.yaml", "configuration file (YAML), read as newsfeed reads it; used only when it exists unless given")
	f.StringVar(&newsfeedPath, "newsfeed", "", "the newsfeed binary of the migrate and worker processes (default: newsfeed beside this binary, else on PATH)")
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
	f.StringSliceVar(&opts.Stages, "stages", nil, "run only the stages whose names contain these words (e.g. fan-out,reads; repost: the repost fan-out and the filtered reads)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the roles in process and the load) to this file")
	f.StringVar(&apiURL, "api", "", "measure running processes behind this API URL instead of in-process roles")
	f.BoolVar(&onCluster, "redis-cluster", false, "run the fan-out and read stages again on the Redis Cluster of --redis-cluster-url, beside redis.url's single Redis")
	f.StringVar(&clusterURL, "redis-cluster-url", "", "seed nodes of the Redis Cluster for --redis-cluster (redis://h1:7000?addr=h2:7001; scripts/cluster.sh env prints one)")
	return cmd
}
