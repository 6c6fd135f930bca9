package app

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// configProblems loads src and returns the problems of the *ConfigError
// it must fail with.
func configProblems(t *testing.T, src ConfigSources) []string {
	t.Helper()
	_, err := LoadConfig(src)
	require.Error(t, err)
	var cerr *ConfigError
	require.True(t, errors.As(err, &cerr), "a *ConfigError: %v", err)
	return cerr.Problems
}

// TestConfigErrorsNameKeyAndSource: a wrong value is reported in our words,
// with its key and where it came from: the file's path, the environment
// variable or the flag.
func TestConfigErrorsNameKeyAndSource(t *testing.T) {
	t.Parallel()

	t.Run("a duration without a unit is refused from the file, the environment and a flag", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "outbox:\n  lease: 30\n  poll_interval: \"30\"\n  retention: 1.5\n")
		require.Equal(t, []string{
			"config file " + path + `: outbox.lease: "30" is not a duration (write a unit: 30s)`,
			"config file " + path + `: outbox.poll_interval: "30" is not a duration (write a unit: 30s)`,
			"config file " + path + `: outbox.retention: "1.5" is not a duration (write a unit: 1.5s)`,
		}, configProblems(t, ConfigSources{File: path, FileRequired: true}))

		require.Equal(t, []string{`NEWSFEED_OUTBOX_LEASE: outbox.lease: "30" is not a duration (write a unit: 30s)`},
			configProblems(t, ConfigSources{Environ: []string{"NEWSFEED_OUTBOX_LEASE=30"}}))
		require.Equal(t, []string{`flag --lease: outbox.lease: "30" is not a duration (write a unit: 30s)`},
			configProblems(t, ConfigSources{Flags: []FlagValue{{Key: "outbox.lease", Value: "30", Flag: "--lease"}}}))
	})

	t.Run("durations with units, and 0, are read alike from every source", func(t *testing.T) {
		t.Parallel()
		zero := writeConfig(t, "outbox:\n  poll_interval: 0\n")
		require.Equal(t, []string{"config file " + zero + ": outbox.poll_interval: must be a positive duration, got 0s"},
			configProblems(t, ConfigSources{File: zero}), "0 needs no unit; then it is refused as not positive")

		cfg, err := LoadConfig(ConfigSources{
			File:    writeConfig(t, "outbox:\n  lease: 45s\nfeed:\n  rebuild_wait: \" 2s \"\n"),
			Environ: []string{"NEWSFEED_OUTBOX_RETENTION=90m"},
			Flags:   []FlagValue{{Key: "queue.claim_idle", Value: 7 * time.Second, Flag: "--claim-idle"}},
		})
		require.NoError(t, err)
		require.Equal(t, 45*time.Second, cfg.Outbox.Lease)
		require.Equal(t, 2*time.Second, cfg.Feed.RebuildWait)
		require.Equal(t, 90*time.Minute, cfg.Outbox.Retention)
		require.Equal(t, 7*time.Second, cfg.Queue.ClaimIdle)
	})

	t.Run("a ratio is read from every source, whole or not", func(t *testing.T) {
		t.Parallel()
		for _, src := range []ConfigSources{
			{File: writeConfig(t, "tracing:\n  sample_ratio: 0.25\n")},
			{Environ: []string{"NEWSFEED_TRACING_SAMPLE_RATIO= 0.25 "}},
			{Flags: []FlagValue{{Key: "tracing.sample_ratio", Value: 0.25, Flag: "--ratio"}}},
		} {
			cfg, err := LoadConfig(src)
			require.NoError(t, err)
			require.InDelta(t, 0.25, cfg.Tracing.SampleRatio, 0)
		}
		cfg, err := LoadConfig(ConfigSources{File: writeConfig(t, "tracing:\n  sample_ratio: 0\n")})
		require.NoError(t, err)
		require.Zero(t, cfg.Tracing.SampleRatio)
	})

	t.Run("wrong types, in our words", func(t *testing.T) {
		t.Parallel()
		for body, want := range map[string]string{
			"feed:\n  max_len: lots\n":                 `feed.max_len: "lots" is not a whole number`,
			"feed:\n  max_len: 2.5\n":                  `feed.max_len: "2.5" is not a whole number`,
			"feed:\n  max_len: true\n":                 `feed.max_len: "true" is not a whole number`,
			"feed:\n  max_len: [1, 2]\n":               `feed.max_len: is a list, not a single value`,
			"feed:\n  max_len:\n":                      `feed.max_len: has no value (remove the line to take the default)`,
			"database:\n  max_conns: 3000000000\n":     `database.max_conns: "3000000000" is too large (at most 2147483647)`,
			"outbox:\n  notify: maybe\n":               `outbox.notify: "maybe" is not true or false`,
			"outbox:\n  notify: 2\n":                   `outbox.notify: "2" is not true or false`,
			"outbox:\n  lease: forever\n":              `outbox.lease: "forever" is not a duration (like 500ms, 30s, 2m, 1h)`,
			"outbox:\n  lease: true\n":                 `outbox.lease: "true" is not a duration (like 500ms, 30s, 2m, 1h)`,
			"log: debug\n":                             `log: is a section of keys (such as log.access_level), not a value`,
			"http:\n  addr:\n    port: 80\n":           `http.addr: is a value, not a section of keys`,
			"feed:\n  max_length: 1\n":                 `unknown key feed.max_length`,
			"auth:\n  secret: [hunter2, hunter3]\n":    `auth.secret: is a list, not a single value`,
			"redis:\n  wait_replicas: \"1\"\n  x: 1\n": `unknown key redis.x`,
			"tracing:\n  sample_ratio: half\n":         `tracing.sample_ratio: "half" is not a number`,
			"tracing:\n  sample_ratio: .nan\n":         `tracing.sample_ratio: "NaN" is not a number`,
			"tracing:\n  sample_ratio: 1.5\n":          `tracing.sample_ratio: must be from 0 to 1, got 1.5`,
			"tracing:\n  endpoint: collector:4318\n":   `tracing.endpoint: "collector:4318" is not an http:// or https:// URL of a collector (http://collector:4318)`,
			"shutdown_drain: -1s\n":                    `shutdown_drain: must not be negative (0 stops at once), got -1s`,
			"log:\n  access_level: loud\n":             `log.access_level: must be debug, info, warn or error, got "loud"`,
		} {
			path := writeConfig(t, body)
			require.Equal(t, []string{"config file " + path + ": " + want}, configProblems(t, ConfigSources{File: path, FileRequired: true}), body)
		}
		require.Equal(t, []string{`NEWSFEED_FEED_MAX_LEN: feed.max_len: "many" is not a whole number`},
			configProblems(t, ConfigSources{Environ: []string{"NEWSFEED_FEED_MAX_LEN=many"}}))
		require.Equal(t, []string{`NEWSFEED_REDIS_CLUSTER: redis.cluster: "yes" is not true or false`},
			configProblems(t, ConfigSources{Environ: []string{"NEWSFEED_REDIS_CLUSTER=yes"}}))
		require.Equal(t, []string{`NEWSFEED_FEED_MAX_LEN: feed.max_len: "" is not a whole number`},
			configProblems(t, ConfigSources{Environ: []string{"NEWSFEED_FEED_MAX_LEN="}}))
		// A flag's text (newsfeed work --concurrency abc) is read as the
		// environment's; TestFlagErrorsNameKeyAndSource runs the command.
		require.Equal(t, []string{`flag --concurrency: fanout.concurrency: "abc" is not a whole number`},
			configProblems(t, ConfigSources{Flags: []FlagValue{{Key: "fanout.concurrency", Value: "abc", Flag: "--concurrency"}}}))
		require.Equal(t, []string{`flag --concurrency: fanout.concurrency: "2.5" is not a whole number`},
			configProblems(t, ConfigSources{Flags: []FlagValue{{Key: "fanout.concurrency", Value: "2.5", Flag: "--concurrency"}}}))
		cfg, err := LoadConfig(ConfigSources{Flags: []FlagValue{{Key: "fanout.concurrency", Value: " 12 ", Flag: "--concurrency"}}})
		require.NoError(t, err)
		require.Equal(t, 12, cfg.Fanout.Concurrency)
	})

	t.Run("what YAML reads as a number or a boolean is text where text is expected", func(t *testing.T) {
		t.Parallel()
		cfg, err := LoadConfig(ConfigSources{File: writeConfig(t, "auth:\n  secret: 12345\nredis:\n  prefix: true\n  wait_replicas: \"1\"\ndatabase:\n  read_url:\n")})
		require.NoError(t, err)
		require.Equal(t, "12345", cfg.Auth.Secret)
		require.Equal(t, "true", cfg.Redis.Prefix)
		require.Equal(t, 1, cfg.Redis.WaitReplicas, "a quoted whole number is one")
		require.Empty(t, cfg.Database.ReadURL, "a key with nothing after it is empty text")
	})

	t.Run("a section whose keys are all commented out is no mistake", func(t *testing.T) {
		t.Parallel()
		_, err := LoadConfig(ConfigSources{File: writeConfig(t, "feed:\n  # max_len: 10\nlog:\n  level: warn\n")})
		require.NoError(t, err)
	})

	t.Run("a value out of range names its source: the file, the environment or a flag", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "feed:\n  max_len: 0\n")
		require.Equal(t, []string{"config file " + path + ": feed.max_len: must be positive, got 0"},
			configProblems(t, ConfigSources{File: path}))
		require.Equal(t, []string{"NEWSFEED_FEED_MAX_LEN: feed.max_len: must be positive, got -1"},
			configProblems(t, ConfigSources{File: path, Environ: []string{"NEWSFEED_FEED_MAX_LEN=-1"}}))
		require.Equal(t, []string{"flag --concurrency: fanout.concurrency: must be positive, got 0"},
			configProblems(t, ConfigSources{Flags: []FlagValue{{Key: "fanout.concurrency", Value: 0, Flag: "--concurrency"}}}))
		require.Equal(t, []string{`NEWSFEED_LOG_LEVEL: log.level: must be debug, info, warn or error, got "loud"`},
			configProblems(t, ConfigSources{Environ: []string{"NEWSFEED_LOG_LEVEL=loud"}}))
	})

	t.Run("a problem of two keys names where the other came from", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "queue:\n  partitions: 4\n")
		require.Equal(t, []string{
			`NEWSFEED_QUEUE_STREAM: queue.stream: must not hold a hash tag ("{") when queue.partitions > 1: each partition has its own, got "{t}" (queue.partitions 4 from config file ` + path + ")",
		}, configProblems(t, ConfigSources{File: path, Environ: []string{"NEWSFEED_QUEUE_STREAM={t}"}}))
	})

	t.Run("every problem at once, in one line", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "feed:\n  max_len: lots\n")
		_, err := LoadConfig(ConfigSources{File: path, Environ: []string{"NEWSFEED_OUTBOX_LEASE=30", "NEWSFEED_LOG_LEVEL=loud"}})
		require.EqualError(t, err, "config file "+path+`: feed.max_len: "lots" is not a whole number; `+
			`NEWSFEED_OUTBOX_LEASE: outbox.lease: "30" is not a duration (write a unit: 30s)`)
		require.NotContains(t, err.Error(), "\n")
	})

	t.Run("a file that is not YAML is named", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "feed: [unclosed\n")
		_, err := LoadConfig(ConfigSources{File: path})
		require.ErrorContains(t, err, "config file "+path+": ")
	})

	t.Run("a secret's wrong value is not shown", func(t *testing.T) {
		t.Parallel()
		_, err := LoadConfig(ConfigSources{Flags: []FlagValue{{Key: "auth.secret", Value: []string{"hunter2"}, Flag: "--secret"}}})
		require.ErrorContains(t, err, "auth.secret: is a list")
		require.NotContains(t, err.Error(), "hunter2")
	})
}

// TestShutdownDrainDefault: after SIGTERM a process that serves the API
// answers on for 5s by default, /readyz answering 503 (e2e's TestDrain
// checks a drain from outside); the file and the environment change it, 0
// turns it off, and a negative one is refused.
func TestShutdownDrainDefault(t *testing.T) {
	t.Parallel()
	cfg, settings, _, err := EffectiveConfig(ConfigSources{})
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, cfg.ShutdownDrain)
	for _, s := range settings {
		if s.Key == "shutdown_drain" {
			require.Equal(t, Setting{Key: "shutdown_drain", Value: "5s", Source: ConfigSource{Kind: SourceDefault}}, s)
		}
	}
	for env, want := range map[string]time.Duration{"2s": 2 * time.Second, "0s": 0, "0": 0, "1m": time.Minute} {
		cfg, err := LoadConfig(ConfigSources{Environ: []string{"NEWSFEED_SHUTDOWN_DRAIN=" + env}})
		require.NoError(t, err, env)
		require.Equal(t, want, cfg.ShutdownDrain, env)
	}
	cfg, err = LoadConfig(ConfigSources{File: writeConfig(t, "shutdown_drain: 2s\n")})
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, cfg.ShutdownDrain)
	require.Equal(t, []string{`NEWSFEED_SHUTDOWN_DRAIN: shutdown_drain: "5" is not a duration (write a unit: 5s)`},
		configProblems(t, ConfigSources{Environ: []string{"NEWSFEED_SHUTDOWN_DRAIN=5"}}))
}

// TestEffectiveConfig: every key with its value and where it came from,
// secrets masked; NEWSFEED_ variables that name no key are told.
func TestEffectiveConfig(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "feed:\n  max_len: 100\n  backfill: 7\nfanout:\n  concurrency: 3\n")
	cfg, settings, ignored, err := EffectiveConfig(ConfigSources{
		File: path,
		Environ: []string{
			"NEWSFEED_FEED_MAX_LEN=200", "NEWSFEED_FANOUT_CONCURRENCY=4", "NEWSFEED_AUTH_SECRET=hunter2",
			"NEWSFEED_DATABASE_URL=postgres://app:hunter2@db:5432/newsfeed?sslmode=disable",
			"NEWSFEED_FEED_MAXLEN=5", "HOME=/root",
		},
		Flags: []FlagValue{{Key: "fanout.concurrency", Value: 9, Flag: "--concurrency"}},
	})
	require.NoError(t, err)
	require.Equal(t, 9, cfg.Fanout.Concurrency)
	require.Equal(t, []string{"NEWSFEED_FEED_MAXLEN"}, ignored)
	byKey := map[string]Setting{}
	for _, s := range settings {
		byKey[s.Key] = s
	}
	require.Len(t, byKey, len(KnownKeys()), "every key, once")
	require.Equal(t, KnownKeys()[0], settings[0].Key, "sorted")
	require.Equal(t, Setting{Key: "feed.max_len", Value: "200", Source: ConfigSource{Kind: SourceEnv, Name: "NEWSFEED_FEED_MAX_LEN"}}, byKey["feed.max_len"])
	require.Equal(t, Setting{Key: "feed.backfill", Value: "7", Source: ConfigSource{Kind: SourceFile, Name: path}}, byKey["feed.backfill"])
	require.Equal(t, Setting{Key: "fanout.concurrency", Value: "9", Source: ConfigSource{Kind: SourceFlag, Name: "--concurrency"}}, byKey["fanout.concurrency"])
	require.Equal(t, Setting{Key: "outbox.redeliver_after", Value: "2m", Source: ConfigSource{Kind: SourceDefault}}, byKey["outbox.redeliver_after"])
	require.Equal(t, "xxxxx", byKey["auth.secret"].Value)
	require.Equal(t, "postgres://app:xxxxx@db:5432/newsfeed?sslmode=disable", byKey["database.url"].Value)
	for _, s := range settings {
		require.NotContains(t, s.Value, "hunter2", s.Key)
	}
	require.Equal(t, "flag --concurrency", byKey["fanout.concurrency"].Source.String())
	require.Equal(t, "config file "+path, byKey["feed.backfill"].Source.String())
	require.Equal(t, "default", byKey["outbox.redeliver_after"].Source.String())
}

// TestMaskValue: secrets are masked by rule — by the key's name, and in
// URLs and connection strings by the parameter's — so that a key added
// later (admin.token, tracing.headers) is masked without being listed.
func TestMaskValue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ key, value, want string }{
		{"auth.secret", "hunter2", "xxxxx"},
		{"auth.secret", "", ""},
		{"admin.token", "hunter2", "xxxxx"},
		{"tracing.headers", "Authorization=Bearer hunter2", "xxxxx"},
		{"smtp.password", "hunter2", "xxxxx"},
		{"cloud.api_key", "hunter2", "xxxxx"},
		{"database.url", "postgres://app:hunter2@db:5432/newsfeed?sslmode=disable", "postgres://app:xxxxx@db:5432/newsfeed?sslmode=disable"},
		{"database.read_url", "postgres://app@replica/newsfeed?password=hunter2&sslmode=require&sslpassword=hunter3",
			"postgres://app@replica/newsfeed?password=xxxxx&sslmode=require&sslpassword=xxxxx"},
		{"database.url", "host=db user=app password=hunter2 dbname=newsfeed", "host=db user=app password=xxxxx dbname=newsfeed"},
		{"database.url", "host=db password='hunter 2' dbname=newsfeed", "host=db password=xxxxx dbname=newsfeed"},
		{"redis.url", "redis://:hunter2@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"redis.url", "rediss://user:hunter2@h1:6379?addr=h2:6379&addr=h3:6379", "rediss://user:xxxxx@h1:6379?addr=h2:6379&addr=h3:6379"},
		{"redis.url", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"tracing.endpoint", "https://collector:4318?token=hunter2", "https://collector:4318?token=xxxxx"},
		{"database.url", "postgres://app:hunter2@db:bad port/x", "xxxxx"},
		{"feed.max_len", "800", "800"},
		{"http.addr", ":8080", ":8080"},
	} {
		got := maskValue(c.key, c.value)
		require.Equal(t, c.want, got, "%s = %s", c.key, c.value)
		require.NotContains(t, got, "hunter", c.key)
	}
}

// TestAdminToken: admin.token is refused shorter than 16 characters, in a
// message that does not show it, and taken from 16 on.
func TestAdminToken(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"NEWSFEED_ADMIN_TOKEN: admin.token: must be at least 16 characters (a random string: openssl rand -hex 32), got 15"},
		configProblems(t, ConfigSources{Environ: []string{"NEWSFEED_ADMIN_TOKEN=fifteen-chars-x"}}))
	cfg, err := LoadConfig(ConfigSources{Environ: []string{"NEWSFEED_ADMIN_TOKEN=sixteen-chars-xx"}})
	require.NoError(t, err)
	require.Equal(t, "sixteen-chars-xx", cfg.Admin.Token)
	cfg, err = LoadConfig(ConfigSources{})
	require.NoError(t, err)
	require.Empty(t, cfg.Admin.Token, "unset by default: the console is off")
}

// TestRequestTimeout: http.request_timeout defaults to 5s, is refused
// below 2s (a request's calls would leave a feed read no time for
// PostgreSQL), and bounds the statements of a process that only serves.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(ConfigSources{})
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, cfg.HTTP.RequestTimeout)
	require.Equal(t, []string{"NEWSFEED_HTTP_REQUEST_TIMEOUT: http.request_timeout: must be at least 2s, got 1.5s"},
		configProblems(t, ConfigSources{Environ: []string{"NEWSFEED_HTTP_REQUEST_TIMEOUT=1.5s"}}))
	cfg, err = LoadConfig(ConfigSources{Environ: []string{"NEWSFEED_HTTP_REQUEST_TIMEOUT=2s"}})
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, cfg.HTTP.RequestTimeout)

	require.Equal(t, 2*time.Second, statementTimeout(cfg, []Role{RoleServe}), "serve alone: a request's time")
	require.Equal(t, 30*time.Second, statementTimeout(cfg, []Role{RoleServe, RoleDispatch, RoleWork}), "a background pass's")
	require.Equal(t, 30*time.Second, statementTimeout(cfg, nil), "a command's")
}
