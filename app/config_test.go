package app

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/stretchr/testify/require"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	return path
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()

	t.Run("defaults are API.md's", func(t *testing.T) {
		t.Parallel()
		cfg, err := LoadConfig(filepath.Join(t.TempDir(), "config.yaml"), false, nil, nil)
		require.NoError(t, err)
		require.Equal(t, "postgres://postgres@127.0.0.1:5432/newsfeed?sslmode=disable", cfg.Database.URL)
		require.Equal(t, "redis://127.0.0.1:6379/0", cfg.Redis.URL)
		require.Equal(t, ":8080", cfg.HTTP.Addr)
		require.Equal(t, ":9090", cfg.Metrics.Addr)
		require.Empty(t, cfg.Auth.Secret)
		require.Equal(t, 800, cfg.Feed.MaxLen)
		require.Equal(t, 5000, cfg.Fanout.ChunkSize)
		require.Equal(t, 50, cfg.Feed.Backfill)
		require.EqualValues(t, 10000, cfg.Fanout.CelebrityThreshold)
		require.Equal(t, 1000, cfg.Posts.MaxChars)
		require.Equal(t, 15*time.Second, cfg.ShutdownTimeout)
	})

	t.Run("flags beat env beat file beat defaults", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "feed:\n  max_len: 100\n  backfill: 7\nfanout:\n  concurrency: 3\noutbox:\n  lease: 5s\n")
		env := []string{"NEWSFEED_FEED_MAX_LEN=200", "NEWSFEED_FANOUT_CONCURRENCY=4", "NEWSFEED_UNRELATED=1", "HOME=/root"}
		cfg, err := LoadConfig(path, true, env, map[string]any{"fanout.concurrency": 9})
		require.NoError(t, err)
		require.Equal(t, 200, cfg.Feed.MaxLen, "env beats file")
		require.Equal(t, 7, cfg.Feed.Backfill, "file beats default")
		require.Equal(t, 9, cfg.Fanout.Concurrency, "flag beats env")
		require.Equal(t, 5*time.Second, cfg.Outbox.Lease)
	})

	t.Run("every key has an environment variable", func(t *testing.T) {
		t.Parallel()
		for _, key := range KnownKeys() {
			require.Contains(t, envKeys, "NEWSFEED_"+upperSnake(key))
		}
		cfg, err := LoadConfig("", false, []string{"NEWSFEED_FANOUT_CELEBRITY_THRESHOLD=5", "NEWSFEED_AUTH_SECRET=s"}, nil)
		require.NoError(t, err)
		require.EqualValues(t, 5, cfg.Fanout.CelebrityThreshold)
		require.Equal(t, "s", cfg.Auth.Secret)
	})

	t.Run("mistakes name the key", func(t *testing.T) {
		t.Parallel()
		for body, key := range map[string]string{
			"feed:\n  max_length: 1\n":    "feed.max_length",
			"feed:\n  max_len: lots\n":    "max_len",
			"outbox:\n  lease: forever\n": "lease",
			"log:\n  level: loud\n":       "log.level",
			"queue:\n  claim_idle: 0s\n":  "queue.claim_idle",
		} {
			_, err := LoadConfig(writeConfig(t, body), true, nil, nil)
			require.ErrorContains(t, err, key, body)
		}
	})

	t.Run("an explicit file must exist, the default one need not", func(t *testing.T) {
		t.Parallel()
		missing := filepath.Join(t.TempDir(), "config.yaml")
		_, err := LoadConfig(missing, true, nil, nil)
		require.ErrorContains(t, err, missing)
		_, err = LoadConfig(missing, false, nil, nil)
		require.NoError(t, err)
	})
}

func upperSnake(key string) string {
	out := []byte(key)
	for i, c := range out {
		switch {
		case c == '.':
			out[i] = '_'
		case c >= 'a' && c <= 'z':
			out[i] = c - 'a' + 'A'
		}
	}
	return string(out)
}

// TestRepositoryConfigIsTheDefaults: config.yaml documents every key with
// its default value.
func TestRepositoryConfigIsTheDefaults(t *testing.T) {
	t.Parallel()
	fromFile, err := LoadConfig(filepath.Join("..", "config.yaml"), true, nil, nil)
	require.NoError(t, err)
	defaults, err := LoadConfig("", false, nil, nil)
	require.NoError(t, err)
	require.Equal(t, defaults, fromFile)
	k := koanf.New(".")
	require.NoError(t, k.Load(file.Provider(filepath.Join("..", "config.yaml")), yaml.Parser()))
	require.ElementsMatch(t, KnownKeys(), k.Keys(), "config.yaml lists every key")
}
