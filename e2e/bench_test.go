package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// TestBenchAnywhere runs `newsfeed bench` on a tiny scenario, every stage
// including those with worker processes of its own, from a directory that
// is not the repository's: it must need no configuration file the user did
// not give (its worker processes once got --config config.yaml, died at
// once, and the big fan-out waited for them forever).
func TestBenchAnywhere(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string // in the working directory
		args  []string
	}{{
		name: "empty directory",
		args: []string{"bench"},
	}, {
		name: "explicit file beside a broken config.yaml",
		files: map[string]string{
			"config.yaml": "feed: [unclosed\n", // not the user's: nobody may read it
			"mine.yaml":   "fanout:\n  page_size: 500\n",
		},
		args: []string{"--config", "mine.yaml", "bench", "--stages", "big fan-out,chunked"},
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
			cmd := exec.CommandContext(ctx, binary, args...)
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
