package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/bench"
	"github.com/newsfeed/newsfeed/internal/testenv"
)

// benchBinary builds newsfeed-bench, once, beside the newsfeed binary
// under test: the bench starts that one for its migrate and worker
// processes, as make bench's bin/ holds both.
var benchBinary = sync.OnceValues(func() (string, error) {
	path := filepath.Join(filepath.Dir(binary), "newsfeed-bench")
	build := exec.Command("go", "build", "-race", "-o", path, "../cmd/newsfeed-bench")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build newsfeed-bench: %w: %s", err, out)
	}
	return path, nil
})

// TestBenchAnywhere runs newsfeed-bench on a tiny scenario, every stage
// including those with worker processes of its own, from a directory that
// is not the repository's: it must need no configuration file the user did
// not give (its worker processes once got --config config.yaml, died at
// once, and the big fan-out waited for them forever).
func TestBenchAnywhere(t *testing.T) {
	benchCmd, err := benchBinary()
	require.NoError(t, err)
	cases := []struct {
		name  string
		files map[string]string // in the working directory
		args  []string
	}{{
		name: "empty directory",
	}, {
		name: "explicit file beside a broken config.yaml",
		files: map[string]string{
			"config.yaml": "feed: [unclosed\n", // not the user's: nobody may read it
			"mine.yaml":   "fanout:\n  page_size: 500\n",
		},
		args: []string{"--config", "mine.yaml", "--stages", "big fan-out,chunked"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
			}
			dbURL := testenv.NewDatabaseURL(t)
			t.Cleanup(func() { dropBenchDatabase(t, dbURL) })

			// Far longer than the run takes: a hang ends here, not in go test's timeout.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			args := append(tc.args, "--runs", "1", "--stage-time", "200ms", "--latency-time", "200ms",
				"--concurrency", "4", "--big", "2000", "--chunked", "2000", "--fanout-posts", "10", "--out", "results")
			cmd := exec.CommandContext(ctx, benchCmd, args...)
			cmd.Dir = dir
			cmd.Env = append(hostEnv(),
				"NEWSFEED_DATABASE_URL="+dbURL,
				"NEWSFEED_REDIS_URL="+testenv.NewRedisDB(t), // the bench clears its key prefix: a database of its own
				"NEWSFEED_LOG_LEVEL=warn",
			)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			require.NoError(t, ctx.Err(), "bench hung; stderr:\n%s", stderr.String())
			require.NoError(t, err, "stderr:\n%s", stderr.String())

			require.Contains(t, stderr.String(), "stage: big fan-out")
			require.Contains(t, stdout.String(), "big fan-out")
			require.Contains(t, stdout.String(), "chunked fan-out, 2 workers vs 1")
			require.Contains(t, stdout.String(), "worker peak RSS", "the big fan-out ran in a worker process")
			require.FileExists(t, filepath.Join(dir, "results", "bench.json"))
		})
	}
}

// dropBenchDatabase drops the database the bench made beside dbURL's.
func dropBenchDatabase(t *testing.T, dbURL string) {
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{cfg.Database + "_bench"}.Sanitize()+" WITH (FORCE)")
	require.NoError(t, err)
}

// TestBenchOnCluster runs `newsfeed-bench --redis-cluster` on a tiny
// scenario: the fan-out and read stages on one Redis and then on the Redis
// Cluster, each with its limit and what it cost every primary, and no key
// of the bench's left on the shared cluster. Skipped without a cluster
// (NEWSFEED_TEST_REDIS_CLUSTER_URL; `make test` sets it for its second pass).
func TestBenchOnCluster(t *testing.T) {
	clusterURL := testenv.RedisClusterURL()
	if clusterURL == "" {
		t.Skip("needs the Redis Cluster: make cluster-up; NEWSFEED_TEST_REDIS_CLUSTER_URL")
	}
	benchCmd, err := benchBinary()
	require.NoError(t, err)
	dir := t.TempDir()
	dbURL := testenv.NewDatabaseURL(t)
	t.Cleanup(func() { dropBenchDatabase(t, dbURL) })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, benchCmd, "--stages", "fan-out throughput,reads",
		"--redis-cluster", "--redis-cluster-url", clusterURL,
		"--runs", "1", "--stage-time", "200ms", "--concurrency", "4", "--big", "1000", "--chunked", "1000",
		"--fanout-posts", "10", "--out", "results")
	cmd.Dir = dir
	cmd.Env = append(hostEnv(),
		"NEWSFEED_DATABASE_URL="+dbURL,
		"NEWSFEED_REDIS_URL="+testenv.NewRedisDB(t),
		"NEWSFEED_LOG_LEVEL=warn",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	require.NoError(t, ctx.Err(), "bench hung; stderr:\n%s", stderr.String())
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "stage: fan-out throughput, cluster")

	var report bench.Report
	raw, err := os.ReadFile(filepath.Join(dir, "results", "bench.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &report))
	byName := map[string]bench.Stage{}
	for _, s := range report.Stages {
		byName[s.Name] = s
	}
	for _, name := range []string{"fan-out", "feed reads", "fan-out, cluster", "feed reads, cluster"} {
		s, ok := byName[name]
		require.True(t, ok, "stage %q in %v", name, report.Stages)
		require.Positive(t, s.Ours, name)
		require.Positive(t, s.Limit, name)
		for _, c := range []*bench.Cost{s.Cost, s.LimitCost} {
			require.NotNil(t, c, name)
			require.Positive(t, c.Redis.CPUPerUnit, name)
			if strings.HasSuffix(name, "cluster") {
				require.GreaterOrEqual(t, len(c.Redis.Shards)+len(c.Redis.Changed), 2, "%s: every primary", name)
			} else {
				require.Len(t, c.Redis.Shards, 1, name)
			}
		}
	}
	require.True(t, strings.HasPrefix(byName["fan-out, cluster"].Redis, "cluster"))
	require.Contains(t, stdout.String(), "fan-out, cluster")
	require.FileExists(t, filepath.Join(dir, "results", "redis-cpu-per-entry.svg"))

	// Nothing of the bench's stays on the shared cluster.
	opts, err := redis.ParseClusterURL(clusterURL)
	require.NoError(t, err)
	rdb := redis.NewClusterClient(opts)
	defer rdb.Close()
	prefix, err := bench.ClusterPrefix(mustBenchURL(t, dbURL))
	require.NoError(t, err)
	var left []string
	var mu sync.Mutex
	require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, _, err := n.Scan(ctx, 0, prefix+"*", 1000).Result()
		mu.Lock()
		left = append(left, keys...)
		mu.Unlock()
		return err
	}))
	require.Empty(t, left, "keys under %s left on the cluster", prefix)
}

func mustBenchURL(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := bench.DatabaseURL(dbURL)
	require.NoError(t, err)
	return u
}
