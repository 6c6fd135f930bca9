package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/bench"
	"github.com/newsfeed/newsfeed/store"
)

// benchPrefix keeps the bench's Redis keys apart from a real install's.
const benchPrefix = "nfbench:"

func benchCommand(load loadFunc, assets Assets) *cobra.Command {
	var opts bench.Options
	var million bool
	var out, apiURL, cpuProfile string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure every stage of the pipeline next to its limit (seeds a synthetic graph)",
		Long: `bench seeds a synthetic social graph and measures post creation, fan-out throughput,
delivery latency, one big fan-out and feed reads, each next to its physical limit measured
in the same run against the same servers. By default it runs every role in this process
against a fresh database named after database.url with the suffix _bench and Redis keys
under "nfbench:". With --api it measures running serve/dispatch/work processes instead;
they must use database.url (an empty, migrated database: the bench seeds it), redis.url,
redis.prefix and auth.secret of this configuration.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if million {
				opts.BigFollowers = 1_000_000
			}
			var overrides map[string]any
			if apiURL == "" {
				overrides = benchOverrides()
			}
			cfg, err := load(cmd, overrides)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var h bench.Harness
			var cleanup func()
			if apiURL == "" {
				h, cleanup, err = startInProcess(ctx, cfg, assets)
			} else {
				h, cleanup, err = connectExternal(ctx, cfg, apiURL)
			}
			if err != nil {
				return err
			}
			defer cleanup()
			opts.PageSize, opts.MaxLen = cfg.Fanout.PageSize, cfg.Feed.MaxLen
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
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
			if report != nil {
				fmt.Fprintln(cmd.OutOrStdout())
				report.WriteTable(cmd.OutOrStdout())
				if serr := report.Save(out); serr != nil {
					return fmt.Errorf("save results: %w", serr)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\nwritten: %s/bench.json, bench.md, delivery-latency.svg, delivery-latency.png\n", out)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Concurrency, "concurrency", 32, "closed-loop clients of the throughput stages")
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
	return cmd
}

// benchOverrides are the keys the bench sets whatever the configuration
// says: it posts in bulk, so its servers limit no rate. (Keys this build does
// not know yet are ignored.)
func benchOverrides() map[string]any {
	return map[string]any{"ratelimit.posts_per_minute": 0, "ratelimit.follows_per_minute": 0}
}

// benchExecutable is the binary of the bench's worker processes; tests
// replace it.
var benchExecutable = os.Executable

// startInProcess makes a fresh bench database and runs every role in this
// process: serve and dispatch together, the workers apart so that the big
// fan-out can move to a worker process of its own.
func startInProcess(ctx context.Context, cfg *Config, assets Assets) (bench.Harness, func(), error) {
	benchCfg := *cfg
	dbURL, err := withDatabaseSuffix(cfg.Database.URL, "_bench")
	if err != nil {
		return bench.Harness{}, nil, err
	}
	if err := recreateDatabase(ctx, dbURL); err != nil {
		return bench.Harness{}, nil, err
	}
	benchCfg.Database.URL = dbURL
	if _, err := runMigrate(ctx, &benchCfg, assets.Schema); err != nil {
		return bench.Harness{}, nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return bench.Harness{}, nil, err
	}
	benchCfg.HTTP.Addr, benchCfg.Metrics.Addr = addr, ""
	benchCfg.Redis.Prefix = benchPrefix
	benchCfg.Fanout.CelebrityThreshold = 1 << 60 // every author is fanned out
	benchCfg.Log.Level = "warn"
	log, err := NewLogger(&benchCfg)
	if err != nil {
		return bench.Harness{}, nil, err
	}
	sys, err := Open(ctx, &benchCfg, log)
	if err != nil {
		return bench.Harness{}, nil, err
	}
	if err := deletePrefix(ctx, sys.Redis, benchPrefix); err != nil {
		sys.Close()
		return bench.Harness{}, nil, err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)

	roleCtx, stopRoles := context.WithCancel(ctx)
	workCtx, stopWork := context.WithCancel(roleCtx)
	var roles, workers sync.WaitGroup
	roles.Add(1)
	go func() { defer roles.Done(); _ = sys.Run(roleCtx, []Role{RoleServe, RoleDispatch}, secret) }()
	workers.Add(1)
	go func() { defer workers.Done(); _ = sys.Run(workCtx, []Role{RoleWork}, secret) }()
	cleanup := func() {
		stopWork()
		stopRoles()
		roles.Wait()
		workers.Wait()
		sys.Close()
	}
	apiURL := "http://" + addr
	if err := waitHealthy(ctx, apiURL); err != nil {
		cleanup()
		return bench.Harness{}, nil, err
	}
	childEnv := workerEnv(os.Environ(), &benchCfg)
	return bench.Harness{
		APIURL: apiURL, Secret: secret, Pool: sys.Primary, Redis: sys.Redis, Prefix: benchPrefix,
		StopWorkers: func() { stopWork(); workers.Wait() },
		WorkerCommand: func() (*exec.Cmd, error) {
			exe, err := benchExecutable()
			if err != nil {
				return nil, err
			}
			// No configuration file (whatever lies in the working directory):
			// the environment carries the whole of this one.
			c := exec.Command(exe, "--config=", "work")
			c.Env = childEnv
			return c, nil
		},
	}, cleanup, nil
}

// workerEnv is the environment of a worker process of the bench: environ
// without its NEWSFEED_ variables, then every key of cfg as NEWSFEED_<KEY>,
// and the bench's overrides, so that the child runs with exactly the
// parent's effective configuration and needs no file.
func workerEnv(environ []string, cfg *Config) []string {
	env := make([]string, 0, len(environ)+64)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "NEWSFEED_") {
			env = append(env, kv)
		}
	}
	set := map[string]string{}
	var keys []string
	put := func(key, value string) {
		name := "NEWSFEED_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
		if _, ok := set[name]; !ok {
			keys = append(keys, name)
		}
		set[name] = value
	}
	flattenConfig(reflect.ValueOf(cfg).Elem(), "", put)
	for key, v := range benchOverrides() {
		put(key, fmt.Sprint(v))
	}
	sort.Strings(keys)
	for _, name := range keys {
		env = append(env, name+"="+set[name])
	}
	return env
}

var durationType = reflect.TypeFor[time.Duration]()

// flattenConfig calls put with every key of a Config (by its koanf tags) and
// its value as LoadConfig reads it back from the environment.
func flattenConfig(v reflect.Value, prefix string, put func(key, value string)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		key, fv := prefix+tag, v.Field(i)
		switch {
		case fv.Type() == durationType:
			put(key, time.Duration(fv.Int()).String())
		case fv.Kind() == reflect.Struct:
			flattenConfig(fv, key+".", put)
		case fv.Kind() == reflect.String:
			put(key, fv.String())
		case fv.Kind() == reflect.Bool:
			put(key, strconv.FormatBool(fv.Bool()))
		case fv.CanInt():
			put(key, strconv.FormatInt(fv.Int(), 10))
		case fv.CanUint():
			put(key, strconv.FormatUint(fv.Uint(), 10))
		case fv.CanFloat():
			put(key, strconv.FormatFloat(fv.Float(), 'g', -1, 64))
		default:
			put(key, fmt.Sprint(fv.Interface()))
		}
	}
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
	rdb, err := connectRedis(ctx, cfg, zap.NewNop(), false)
	if err != nil {
		pool.Close()
		return bench.Harness{}, nil, err
	}
	if err := waitHealthy(ctx, apiURL); err != nil {
		pool.Close()
		_ = rdb.Close()
		return bench.Harness{}, nil, err
	}
	return bench.Harness{
			APIURL: apiURL, Secret: []byte(cfg.Auth.Secret), Pool: pool, Redis: rdb, Prefix: cfg.Redis.Prefix,
		}, func() {
			pool.Close()
			_ = rdb.Close()
		}, nil
}

func waitHealthy(ctx context.Context, apiURL string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, "GET", apiURL+"/healthz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not become healthy", apiURL)
}

func withDatabaseSuffix(dbURL, suffix string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("database.url: %w", err)
	}
	u.Path += suffix
	return u.String(), nil
}

// recreateDatabase drops the bench database, so every run starts the same.
func recreateDatabase(ctx context.Context, dbURL string) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return fmt.Errorf("database.url: %w", err)
	}
	name := cfg.Database
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("database.url: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop bench database: %w", err)
	}
	return nil
}

func deletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+"*", 10_000).Iterator()
	batch := make([]string, 0, 1000)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.Unlink(ctx, k)
			}
			return nil
		})
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
