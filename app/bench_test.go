package app

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/bench"
	"github.com/newsfeed/newsfeed/internal/testenv"
)

// TestBenchSmoke runs `newsfeed bench` on a tiny scenario, so that `make
// bench` does not rot: every in-process stage runs and the report is
// written. (The stages with worker processes of their own need the built
// binary; e2e-style, they are run by `make bench` itself.)
func TestBenchSmoke(t *testing.T) {
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
	out := t.TempDir()
	schema, err := os.ReadFile(filepath.Join("..", "schema.sql"))
	require.NoError(t, err)

	root := NewRootCommand(Assets{Schema: string(schema)})
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"bench", // no config.yaml in app/: defaults and the environment
		"--runs", "1", "--stage-time", "300ms", "--latency-time", "300ms", "--concurrency", "4",
		"--big", "1000", "--chunked", "1000", "--fanout-posts", "20",
		"--stages", "post creation,fan-out throughput,delivery,reads,inactive", "--out", out})
	err = root.ExecuteContext(context.Background())
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
	require.Len(t, names, 7, strings.Join(names, ", "))
	require.Contains(t, stdout.String(), "post creation")
	for _, f := range []string{"bench.md", "delivery-latency.svg", "delivery-latency.png"} {
		require.FileExists(t, filepath.Join(out, f))
	}
}
