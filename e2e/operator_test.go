package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/feed"
)

// failLine runs the binary in dir, requires it to fail — status 1, nothing
// on stdout, exactly one line on stderr — and returns that line.
func failLine(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	stdout, stderr, code := runIn(t, dir, env, args...)
	require.Equal(t, 1, code, "stdout: %s\nstderr: %s", stdout, stderr)
	require.Empty(t, stdout)
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	require.Len(t, lines, 1, "one line on stderr: %q", stderr)
	return lines[0]
}

// TestConfigCheck: `config check` validates as the roles do and prints every
// key with its value and where it came from, secrets masked; a bad
// configuration exits 1 with one line that names the key and the source.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(
		"feed:\n  max_len: 100\ndatabase:\n  url: postgres://app:hunter2@db.internal:5432/newsfeed?sslmode=require\n"), 0o644))
	env := []string{"NEWSFEED_AUTH_SECRET=hunter3", "NEWSFEED_FANOUT_CONCURRENCY=3", "NEWSFEED_FEED_MAXLEN=5"}

	stdout, stderr, code := runIn(t, dir, env, "config", "check")
	require.Zero(t, code, stderr)
	require.NotContains(t, stdout+stderr, "hunter")
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if f := strings.Fields(line); len(f) >= 3 {
			rows[f[0]] = f[1:]
		}
	}
	require.Equal(t, []string{"100", "config", "file", "config.yaml"}, rows["feed.max_len"])
	require.Equal(t, []string{"3", "NEWSFEED_FANOUT_CONCURRENCY"}, rows["fanout.concurrency"])
	require.Equal(t, []string{"xxxxx", "NEWSFEED_AUTH_SECRET"}, rows["auth.secret"])
	require.Equal(t, []string{"postgres://app:xxxxx@db.internal:5432/newsfeed?sslmode=require", "config", "file", "config.yaml"}, rows["database.url"])
	require.Equal(t, []string{"30s", "default"}, rows["outbox.lease"])
	require.Contains(t, stderr, "NEWSFEED_FEED_MAXLEN names no configuration key")

	stdout, stderr, code = runIn(t, dir, env, "config", "check", "--json")
	require.Zero(t, code, stderr)
	var out struct {
		Settings []struct {
			Key, Value string
			Source     struct{ Kind, Name string }
		}
		IgnoredEnv []string `json:"ignored_env"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	require.Contains(t, out.IgnoredEnv, "NEWSFEED_FEED_MAXLEN") // and the test's own NEWSFEED_TEST_ variables, if set
	sources := map[string]string{}
	for _, s := range out.Settings {
		sources[s.Key] = s.Source.Kind + " " + s.Source.Name
	}
	require.Equal(t, "file config.yaml", sources["feed.max_len"])
	require.Equal(t, "env NEWSFEED_FANOUT_CONCURRENCY", sources["fanout.concurrency"])
	require.Equal(t, "default ", sources["queue.stream"])

	for _, c := range []struct {
		name, file string
		env        []string
		want       string
	}{
		{"a duration without a unit in the file", "outbox:\n  lease: 30\n", nil,
			`newsfeed: config file config.yaml: outbox.lease: "30" is not a duration (write a unit: 30s)`},
		{"a duration without a unit in the environment", "", []string{"NEWSFEED_OUTBOX_LEASE=30"},
			`newsfeed: NEWSFEED_OUTBOX_LEASE: outbox.lease: "30" is not a duration (write a unit: 30s)`},
		{"a wrong type in the file", "redis:\n  cluster: sometimes\n", nil,
			`newsfeed: config file config.yaml: redis.cluster: "sometimes" is not true or false`},
		{"out of range in the environment", "", []string{"NEWSFEED_FEED_MAX_LEN=0"},
			`newsfeed: NEWSFEED_FEED_MAX_LEN: feed.max_len: must be positive, got 0`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if c.file != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(c.file), 0o644))
			}
			require.Equal(t, c.want, failLine(t, dir, c.env, "config", "check"))
			// Every role refuses it with the same line.
			require.Equal(t, c.want, failLine(t, dir, append([]string{"NEWSFEED_AUTH_SECRET=x"}, c.env...), "serve"))
		})
	}
}

// TestOutboxDead: `outbox dead` lists dead events with their type,
// aggregate, attempts, failures, last error and when they died, as a table
// or JSON; `retry-dead --id` of an event that is not dead, or does not
// exist, exits 1 with one line that says which.
func TestOutboxDead(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	env := c.env

	stdout, stderr, code := runIn(t, t.TempDir(), env, "outbox", "dead")
	require.Zero(t, code, stderr)
	require.Equal(t, "no dead events\n", stdout)

	ids := c.queryInts(`
INSERT INTO outbox (event_type, payload, status, attempts, failures, last_error, died_at) VALUES
  ('post.created', '{"post_id": 41, "author_id": 1}', 'dead', 12, 10, 'fan out post 41: post 41 does not exist', now() - interval '1 hour'),
  ('follow.created', '{"follower_id": 7, "followee_id": 8}', 'dead', 5, 5, 'delivered 6 times:
a worker died on it', now()),
  ('post.deleted', '{"post_id": 43, "author_id": 1}', 'pending', 0, 0, NULL, NULL)
RETURNING id`)
	olderDead, newerDead, pending := ids[0], ids[1], ids[2]

	stdout, stderr, code = runIn(t, t.TempDir(), env, "outbox", "dead")
	require.Zero(t, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 4, stdout)
	require.Equal(t, []string{"ID", "TYPE", "AGGREGATE", "ATTEMPTS", "FAILURES", "DIED", "LAST", "ERROR"}, strings.Fields(lines[0]))
	newer := strings.Fields(lines[1])
	require.Equal(t, []string{strconv.FormatInt(newerDead, 10), "follow.created", "user", "7", "5", "5"}, newer[:6])
	require.Contains(t, lines[1], "delivered 6 times: a worker died on it", "the error on one line")
	older := strings.Fields(lines[2])
	require.Equal(t, []string{strconv.FormatInt(olderDead, 10), "post.created", "post", "41", "12", "10"}, older[:6])
	died, err := time.Parse(time.RFC3339, older[6])
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(-time.Hour), died, time.Minute)
	require.Contains(t, lines[2], "post 41 does not exist")
	require.Equal(t, "2 dead event(s)", lines[3])

	stdout, stderr, code = runIn(t, t.TempDir(), env, "outbox", "dead", "--limit", "1", "--json")
	require.Zero(t, code, stderr)
	var out struct {
		Total  int64
		Events []struct {
			ID        int64
			Type      string
			Aggregate struct {
				Type string
				ID   int64
			}
			Attempts, Failures int
			LastError          string     `json:"last_error"`
			DiedAt             *time.Time `json:"died_at"`
			Payload            map[string]int64
		}
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	require.EqualValues(t, 2, out.Total)
	require.Len(t, out.Events, 1)
	e := out.Events[0]
	require.Equal(t, newerDead, e.ID)
	require.Equal(t, "follow.created", e.Type)
	require.Equal(t, "user", e.Aggregate.Type)
	require.EqualValues(t, 7, e.Aggregate.ID)
	require.Equal(t, 5, e.Attempts)
	require.Equal(t, "delivered 6 times:\na worker died on it", e.LastError, "whole in JSON")
	require.NotNil(t, e.DiedAt)
	require.EqualValues(t, 8, e.Payload["followee_id"])

	stdout, stderr, code = runIn(t, t.TempDir(), env, "outbox", "dead", "--limit", "1")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "1 of 2 dead events, the last to die first (--limit 2 for more)")

	require.Equal(t, fmt.Sprintf("newsfeed: --id %d: outbox event %d is pending: only a dead event can be retried", pending, pending),
		failLine(t, t.TempDir(), env, "outbox", "retry-dead", "--id", strconv.FormatInt(pending, 10)))
	missing := pending + 1000
	require.Equal(t, fmt.Sprintf("newsfeed: --id %d: no such outbox event (finished events are deleted after outbox.retention)", missing),
		failLine(t, t.TempDir(), env, "outbox", "retry-dead", "--id", strconv.FormatInt(missing, 10)))
	require.Equal(t, "pending", c.outboxStatus(pending))
	require.Equal(t, "newsfeed: --limit must be positive", failLine(t, t.TempDir(), env, "outbox", "dead", "--limit", "0"))

	stdout, stderr, code = runIn(t, t.TempDir(), env, "outbox", "retry-dead", "--id", strconv.FormatInt(olderDead, 10))
	require.Zero(t, code, stderr)
	require.Equal(t, "1 dead event(s) made pending again\n", stdout)
	require.Equal(t, "pending", c.outboxStatus(olderDead))
	stdout, _, code = runIn(t, t.TempDir(), env, "outbox", "dead", "--json")
	require.Zero(t, code)
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.EqualValues(t, 1, out.Total, "the revived one left the list")
	var stillDead int64
	require.NoError(t, c.pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status = 'dead'").Scan(&stillDead))
	require.EqualValues(t, 1, stillDead)
}

// TestFeedRebuildAndDrop: `feed rebuild --user N` rebuilds that user's feed
// from PostgreSQL now and says what Redis holds; `feed drop --user N` drops
// it, and the next read rebuilds it.
func TestFeedRebuildAndDrop(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	const reader = 10
	_, err := c.pool.Exec(ctx, `INSERT INTO follows (follower_id, followee_id) VALUES (10, 1), (10, 2)`)
	require.NoError(t, err)
	posts := c.queryInts(`INSERT INTO posts (author_id, body) VALUES (1, 'a'), (3, 'not followed'), (2, 'b'), (1, 'c') RETURNING id`)
	want := []int64{posts[0], posts[2], posts[3]}
	rdb := c.redis()

	stdout, stderr, code := runIn(t, t.TempDir(), c.env, "feed", "rebuild", "--user", "10")
	require.Zero(t, code, stderr)
	require.Equal(t, "user 10's feed rebuilt from PostgreSQL: 3 posts in Redis, every post there is\n", stdout)
	stored, err := feed.Inspect(ctx, rdb, c.prefix, reader)
	require.NoError(t, err)
	require.True(t, stored.Complete)
	require.Equal(t, want, stored.IDs)

	// A feed gone wrong (an entry lost behind the product's back) is made right.
	_, err = c.pool.Exec(ctx, `UPDATE posts SET deleted_at = now() WHERE id = $1`, posts[2])
	require.NoError(t, err)
	stdout, stderr, code = runIn(t, t.TempDir(), c.env, "feed", "rebuild", "--user", "10")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "2 posts in Redis")
	stored, err = feed.Inspect(ctx, rdb, c.prefix, reader)
	require.NoError(t, err)
	require.Equal(t, []int64{posts[0], posts[3]}, stored.IDs)

	stdout, stderr, code = runIn(t, t.TempDir(), c.env, "feed", "drop", "--user", "10")
	require.Zero(t, code, stderr)
	require.Equal(t, "user 10's feed dropped from Redis (it held 2 posts); their next read rebuilds it from PostgreSQL\n", stdout)
	stored, err = feed.Inspect(ctx, rdb, c.prefix, reader)
	require.NoError(t, err)
	require.False(t, stored.Exists)
	stdout, _, code = runIn(t, t.TempDir(), c.env, "feed", "drop", "--user", "10")
	require.Zero(t, code)
	require.Contains(t, stdout, "(it was not in Redis)")

	// A reader who follows more than fanout.following_threshold keeps no feed.
	stdout, stderr, code = runIn(t, t.TempDir(), append(append([]string{}, c.env...), "NEWSFEED_FANOUT_FOLLOWING_THRESHOLD=1"),
		"feed", "rebuild", "--user", "10")
	require.Zero(t, code, stderr)
	require.Equal(t, "user 10 follows more than fanout.following_threshold (1) accounts: "+
		"Redis keeps no feed for them, their reads come from PostgreSQL\n", stdout)
	stored, err = feed.Inspect(ctx, rdb, c.prefix, reader)
	require.NoError(t, err)
	require.False(t, stored.Exists)

	require.Equal(t, "newsfeed: --user must be a positive user id", failLine(t, t.TempDir(), c.env, "feed", "rebuild", "--user", "0"))
	require.Contains(t, failLine(t, t.TempDir(), c.env, "feed", "drop"), `"user" not set`)
	require.Contains(t, failLine(t, t.TempDir(), append(append([]string{}, c.env...), "NEWSFEED_REDIS_URL=redis://127.0.0.1:1/0",
		"NEWSFEED_REDIS_CLUSTER=false", "NEWSFEED_DATABASE_CONNECT_WAIT=1s"), "feed", "rebuild", "--user", "10"), "redis.url")
}
