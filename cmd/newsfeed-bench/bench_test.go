package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/app"
	"github.com/newsfeed/newsfeed/bench"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/internal/testenv"
)

// newsfeed is the service binary the tests' benches start (migrate, work),
// built once by TestMain.
var newsfeed string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "newsfeed-bench-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	newsfeed = filepath.Join(dir, "newsfeed")
	build := exec.Command("go", "build", "-o", newsfeed, "../..")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build newsfeed:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// benchSetup points the bench at a database and a Redis database of the
// test's own, and drops the bench's database at the end.
func benchSetup(t *testing.T) {
	t.Helper()
	dbURL := testenv.NewDatabaseURL(t)
	t.Cleanup(func() {
		cfg, err := pgx.ParseConfig(dbURL)
		require.NoError(t, err)
		conn, err := pgx.Connect(context.Background(), testenv.DatabaseURL())
		require.NoError(t, err)
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{cfg.Database + "_bench"}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	})
	t.Setenv("NEWSFEED_DATABASE_URL", dbURL)
	t.Setenv("NEWSFEED_REDIS_URL", testenv.NewRedisDB(t))
	t.Setenv("NEWSFEED_LOG_LEVEL", "error")
}

// TestBenchSmoke runs newsfeed-bench on a tiny scenario, so that `make
// bench` does not rot: every in-process stage runs and the report is
// written. (The stages with worker processes of their own:
// e2e/bench_test.go runs them.)
func TestBenchSmoke(t *testing.T) {
	benchSetup(t)
	out := t.TempDir()

	root := newCommand()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"--newsfeed", newsfeed, // no config.yaml here: defaults and the environment
		"--runs", "1", "--stage-time", "300ms", "--latency-time", "300ms", "--concurrency", "4",
		"--big", "1000", "--chunked", "1000", "--fanout-posts", "20",
		"--stages", "post creation,fan-out throughput,repost fan-out,fan-out at full feeds,memory,delivery,reads,streams,inactive,follow many",
		"--out", out})
	err := root.ExecuteContext(context.Background())
	require.NoError(t, err, "stderr:\n%s", stderr.String())

	var report bench.Report
	raw, err := os.ReadFile(filepath.Join(out, "bench.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &report))
	var names []string
	for _, s := range report.Stages {
		names = append(names, s.Name)
		require.Positive(t, s.Ours, s.Name)
		require.Positive(t, s.Limit, s.Name)
	}
	// post creation; fan-out and its Redis CPU, fresh and at full feeds, and
	// of reposts; four memory lines; three delivery classes; reads, filtered
	// reads against the limit and against the plain reads; live streams
	// (Redis CPU idle and connected, each against the baseline without the
	// live path, and three latencies under light load and three in a
	// burst); inactive followers; the reads of readers who follow many
	// against the plain reads.
	require.Len(t, names, 27, strings.Join(names, ", "))
	require.Contains(t, names, "live delivery (a burst of 4 posts): post committed → event at a connected reader")
	require.Contains(t, names, "repost fan-out")
	require.Contains(t, names, "filtered reads / plain reads")
	require.Contains(t, names, "reads of readers who follow 10,000 / plain reads")
	require.Contains(t, names, "live path idle: Redis CPU per fan-out entry", "the live stage had its baseline")
	require.Contains(t, stdout.String(), "post creation")
	for _, f := range []string{"bench.md", "delivery-latency.svg", "delivery-latency.png"} {
		require.FileExists(t, filepath.Join(out, f))
	}
}

// TestBenchWorkerDeathEndsStage: a worker process that dies, at start or in
// the middle of the big fan-out it was started for, ends the stage at once
// with the way it exited and the last lines of its stderr, where the bench
// used to wait for a fan-out nobody did.
func TestBenchWorkerDeathEndsStage(t *testing.T) {
	benchSetup(t)
	cases := []struct {
		name   string
		script string   // the worker process; $PIDFILE is where it may write its pid
		kill   bool     // kill -9 the worker once it has written its pid
		wants  []string // in the error
	}{{
		name: "exits at start",
		script: "echo 'starting' >&2\n" +
			"echo 'newsfeed: config file config.yaml: open config.yaml: no such file or directory' >&2\nexit 1\n",
		wants: []string{"big fan-out: worker 1", "exited: exit status 1",
			"starting", "config file config.yaml: open config.yaml: no such file or directory"},
	}, {
		name:   "killed mid-stage",
		script: "echo 'working' >&2\necho $$ > \"$PIDFILE\"\nexec sleep 600\n",
		kill:   true,
		wants:  []string{"big fan-out: worker 1", "exited: signal: killed", "working"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			script, pidFile := filepath.Join(dir, "worker.sh"), filepath.Join(dir, "worker.pid")
			// It stands in for the newsfeed binary: migrate is the real one's.
			require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"+
				"if [ \"$2\" = migrate ]; then exec \"$REAL_NEWSFEED\" \"$@\"; fi\n"+tc.script), 0o755))
			t.Setenv("PIDFILE", pidFile)
			t.Setenv("REAL_NEWSFEED", newsfeed)

			// Far longer than the stage takes; a hang runs into it.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if tc.kill {
				go func() {
					for ctx.Err() == nil {
						if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
							pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
							if err == nil {
								_ = syscall.Kill(pid, syscall.SIGKILL)
							}
							return
						}
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			root := newCommand()
			var stdout, stderr bytes.Buffer
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			root.SetArgs([]string{"--newsfeed", script, "--big", "1000", "--chunked", "1000", "--stages", "big fan-out", "--out", t.TempDir()})
			err := root.ExecuteContext(ctx)
			require.NoError(t, ctx.Err(), "the stage did not end when its worker died; stderr:\n%s", stderr.String())
			require.Error(t, err)
			var exit *bench.ExitError
			require.ErrorAs(t, err, &exit)
			for _, w := range tc.wants {
				require.Contains(t, err.Error(), w)
			}
			require.Contains(t, stderr.String(), "stage: big fan-out", "progress still shown")
		})
	}
}

// TestBenchClusterFlags: --redis-cluster names its cluster, compares it with
// a single Redis and runs the system in process; anything else is refused
// before the bench touches a server.
func TestBenchClusterFlags(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no URL", nil, []string{"--redis-cluster"}, "--redis-cluster needs --redis-cluster-url"},
		{"URL alone", nil, []string{"--redis-cluster-url", "redis://127.0.0.1:7000"}, "is used with --redis-cluster"},
		{"with --api", nil, []string{"--redis-cluster", "--redis-cluster-url", "redis://127.0.0.1:7000", "--api", "http://127.0.0.1:1"},
			"with --api"},
		{"redis.url a cluster already", map[string]string{"NEWSFEED_REDIS_CLUSTER": "true"},
			[]string{"--redis-cluster", "--redis-cluster-url", "redis://127.0.0.1:7000"}, "redis.url must name a single Redis"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			root := newCommand()
			var stdout, stderr bytes.Buffer
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			root.SetArgs(append([]string{"--config=", "--out", t.TempDir()}, tc.args...))
			err := root.ExecuteContext(context.Background())
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestNewsfeedBinary: the workers' binary is --newsfeed, else newsfeed
// beside the bench's own binary, else newsfeed on PATH; without any, the
// error says how to get one.
func TestNewsfeedBinary(t *testing.T) {
	self := filepath.Join(t.TempDir(), "newsfeed-bench")
	onPath := t.TempDir()
	t.Setenv("PATH", onPath)

	_, err := newsfeedBinary("", self)
	require.ErrorContains(t, err, "make build")

	pathBinary := filepath.Join(onPath, "newsfeed")
	require.NoError(t, os.WriteFile(pathBinary, []byte("#!/bin/sh\n"), 0o755))
	got, err := newsfeedBinary("", self)
	require.NoError(t, err)
	require.Equal(t, pathBinary, got)

	beside := filepath.Join(filepath.Dir(self), "newsfeed")
	require.NoError(t, os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755))
	got, err = newsfeedBinary("", self)
	require.NoError(t, err)
	require.Equal(t, beside, got)

	got, err = newsfeedBinary("/elsewhere/newsfeed", self)
	require.NoError(t, err)
	require.Equal(t, "/elsewhere/newsfeed", got)
}

// TestBaselineConfigSetsEveryField: the live stage's baseline workers are
// the work role's without the live path, so every field of fanout.Config
// comes from the configuration as the work role's does, or is one that
// does not change what the workers do in Redis. A field added to
// fanout.Config fails here until baselineConfig considers it.
func TestBaselineConfigSetsEveryField(t *testing.T) {
	cfg, err := app.LoadConfig(app.ConfigSources{Environ: []string{
		// Values that no default has, so that a field left zero shows.
		"NEWSFEED_FANOUT_CONCURRENCY=7", "NEWSFEED_FANOUT_PAGE_SIZE=123", "NEWSFEED_FANOUT_CHUNK_SIZE=4567",
		"NEWSFEED_QUEUE_CLAIM_IDLE=41s", "NEWSFEED_QUEUE_MAX_DELIVERIES=9", "NEWSFEED_OUTBOX_MAX_ATTEMPTS=11",
		"NEWSFEED_OUTBOX_BACKOFF_BASE=3s", "NEWSFEED_OUTBOX_BACKOFF_MAX=2h", "NEWSFEED_OUTBOX_REDELIVER_AFTER=3m",
		"NEWSFEED_SHUTDOWN_TIMEOUT=17s",
	}})
	require.NoError(t, err)
	got := baselineConfig(cfg, zap.NewNop())
	require.Equal(t, fanout.Config{
		Concurrency: 7, PageSize: 123, ChunkSize: 4567, ClaimIdle: 41 * time.Second, MaxDeliveries: 9, MaxAttempts: 11,
		Backoff: got.Backoff, RedeliverAfter: 3 * time.Minute, ShutdownTimeout: 17 * time.Second, Logger: got.Logger,
	}, got)
	require.Equal(t, 3*time.Second, got.Backoff.Base)
	require.Equal(t, 2*time.Hour, got.Backoff.Max)

	// Left to their defaults on purpose: the consumer's name (host-pid, as
	// the work role's), metrics and outages (counted and explained in this
	// process only), tracing (no baseline with tracing.endpoint) and the
	// live path, which the baseline is without; the claim interval, half of
	// claim_idle by default, as the work role leaves it.
	unset := map[string]bool{"Consumer": true, "Metrics": true, "Outages": true, "TracerProvider": true, "Live": true,
		"ClaimInterval": true}
	v := reflect.ValueOf(got)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if unset[name] {
			require.True(t, v.Field(i).IsZero(), "%s is set: the baseline would differ from the work role", name)
			continue
		}
		require.False(t, v.Field(i).IsZero(), "fanout.Config.%s: baselineConfig does not set it as app's work role does", name)
	}
}
