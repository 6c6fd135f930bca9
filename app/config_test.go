package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/stretchr/testify/assert"
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
		cfg, err := LoadConfig(ConfigSources{File: filepath.Join(t.TempDir(), "config.yaml")})
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
		require.Equal(t, 1, cfg.Queue.Partitions, "one stream, the key it always had")
	})

	t.Run("flags beat env beat file beat defaults", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "feed:\n  max_len: 100\n  backfill: 7\nfanout:\n  concurrency: 3\noutbox:\n  lease: 5s\n")
		env := []string{"NEWSFEED_FEED_MAX_LEN=200", "NEWSFEED_FANOUT_CONCURRENCY=4", "NEWSFEED_UNRELATED=1", "HOME=/root"}
		cfg, err := LoadConfig(ConfigSources{File: path, FileRequired: true, Environ: env,
			Flags: []FlagValue{{Key: "fanout.concurrency", Value: 9, Flag: "--concurrency"}}})
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
		cfg, err := LoadConfig(ConfigSources{Environ: []string{"NEWSFEED_FANOUT_CELEBRITY_THRESHOLD=5", "NEWSFEED_AUTH_SECRET=s"}})
		require.NoError(t, err)
		require.EqualValues(t, 5, cfg.Fanout.CelebrityThreshold)
		require.Equal(t, "s", cfg.Auth.Secret)
	})

	t.Run("mistakes name the key", func(t *testing.T) {
		t.Parallel()
		for body, key := range map[string]string{
			"feed:\n  max_length: 1\n":                     "feed.max_length",
			"feed:\n  max_len: lots\n":                     "max_len",
			"outbox:\n  lease: forever\n":                  "lease",
			"log:\n  level: loud\n":                        "log.level",
			"queue:\n  claim_idle: 0s\n":                   "queue.claim_idle",
			"queue:\n  partitions: 0\n":                    "queue.partitions",
			"queue:\n  partitions: 1025\n":                 "queue.partitions",
			"queue:\n  partitions: 2\n  stream: \"{t}\"\n": "queue.stream",
		} {
			_, err := LoadConfig(ConfigSources{File: writeConfig(t, body), FileRequired: true})
			require.ErrorContains(t, err, key, body)
		}
	})

	t.Run("an explicit file must exist, the default one need not", func(t *testing.T) {
		t.Parallel()
		missing := filepath.Join(t.TempDir(), "config.yaml")
		_, err := LoadConfig(ConfigSources{File: missing, FileRequired: true})
		require.ErrorContains(t, err, missing)
		_, err = LoadConfig(ConfigSources{File: missing})
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
	fromFile, err := LoadConfig(ConfigSources{File: filepath.Join("..", "config.yaml"), FileRequired: true})
	require.NoError(t, err)
	defaults, err := LoadConfig(ConfigSources{})
	require.NoError(t, err)
	require.Equal(t, defaults, fromFile)
	k := koanf.New(".")
	require.NoError(t, k.Load(file.Provider(filepath.Join("..", "config.yaml")), yaml.Parser()))
	require.ElementsMatch(t, KnownKeys(), k.Keys(), "config.yaml lists every key")
}

// configDocTable returns the rows of the configuration table of
// docs/CONFIG.md: key → default, as the table writes it. The columns are
// found by their header ("key", "default"); a row may name several keys
// ("`a`, `b` | `1s`, `1h` | …").
func configDocTable(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "CONFIG.md"))
	require.NoError(t, err)
	table := map[string]string{}
	keyCol, defaultCol := -1, -1
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if keyCol < 0 {
			for i, c := range cells {
				switch strings.TrimSpace(c) {
				case "key":
					keyCol = i
				case "default":
					defaultCol = i
				}
			}
			require.True(t, keyCol >= 0 && defaultCol >= 0, "docs/CONFIG.md's table has no key and default columns: %s", line)
			continue
		}
		if !strings.HasPrefix(strings.TrimSpace(cells[keyCol]), "`") {
			continue // the header's separator row
		}
		require.Greater(t, len(cells), max(keyCol, defaultCol), "docs/CONFIG.md row: %s", line)
		keys := strings.Split(cells[keyCol], ",")
		values := strings.Split(cells[defaultCol], ",")
		require.Len(t, values, len(keys), "docs/CONFIG.md row names %d keys and %d defaults: %s", len(keys), len(values), line)
		for i, key := range keys {
			key = strings.Trim(strings.TrimSpace(key), "`")
			_, twice := table[key]
			require.False(t, twice, "docs/CONFIG.md lists %s twice", key)
			table[key] = strings.Trim(strings.TrimSpace(values[i]), "`")
		}
	}
	require.NotEmpty(t, table, "docs/CONFIG.md's configuration table has no rows")
	return table
}

// sameDefault reports whether the written default is the value v of the
// defaults: durations compare as durations ("2m" is "2m0s"), and an empty
// string is written "empty" or "none" (or "none (empty)").
func sameDefault(written string, v any) bool {
	want := fmt.Sprint(v)
	if want == "" {
		return written == "empty" || written == "none" || written == "none (empty)"
	}
	if w, err := time.ParseDuration(written); err == nil {
		d, err := time.ParseDuration(want)
		return err == nil && d == w
	}
	return written == want
}

// TestConfigDocIsTheDefaults: docs/CONFIG.md's configuration table lists
// every key, once, with its default, and no key that does not exist.
func TestConfigDocIsTheDefaults(t *testing.T) {
	t.Parallel()
	table := configDocTable(t)
	for _, key := range KnownKeys() {
		written, ok := table[key]
		if !assert.True(t, ok, "docs/CONFIG.md's configuration table has no row for %s", key) {
			continue
		}
		assert.True(t, sameDefault(written, defaults[key]),
			"docs/CONFIG.md says %s defaults to %q; the code says %v", key, written, defaults[key])
	}
	for key := range table {
		_, known := defaults[key]
		assert.True(t, known, "docs/CONFIG.md's configuration table names %s, which is no configuration key", key)
	}
}
