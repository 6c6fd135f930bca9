package app

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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

// updateDocs rewrites the generated parts of the docs:
// go test ./app -run TestConfigDoc -update (go generate ./app runs it).
var updateDocs = flag.Bool("update", false, "rewrite docs/CONFIG.md's table of keys from Config.keys")

// The markers around docs/CONFIG.md's generated table.
const (
	configDocBegin = "<!-- BEGIN keys: generated from app/config.go by `go generate ./app`; do not edit -->\n"
	configDocEnd   = "<!-- END keys -->\n"
)

// configDocTable writes the table of keys of docs/CONFIG.md from the
// declaration: every key, in the declaration's order, with its environment
// variable, its default, the values it takes and what it does.
func configDocTable() string {
	var b strings.Builder
	b.WriteString("| key | env | default | values | meaning |\n| --- | --- | --- | --- | --- |\n")
	for _, k := range declaredKeys(&Config{}) {
		def := "empty"
		if text := formatValue(k.def); text != "" {
			def = "`" + text + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s |\n", k.key, envName(k.key), def, k.values, k.doc)
	}
	return b.String()
}

// TestConfigDoc: docs/CONFIG.md's table of keys is the one Config.keys
// makes; -update writes it.
func TestConfigDoc(t *testing.T) {
	path := filepath.Join("..", "docs", "CONFIG.md")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(raw)
	begin, end := strings.Index(doc, configDocBegin), strings.Index(doc, configDocEnd)
	require.True(t, begin >= 0 && end > begin, "docs/CONFIG.md has no %q … %q", configDocBegin, configDocEnd)
	table := configDocTable()
	if *updateDocs {
		require.NoError(t, os.WriteFile(path, []byte(doc[:begin+len(configDocBegin)]+table+doc[end:]), 0o644))
		return
	}
	written := strings.Split(doc[begin+len(configDocBegin):end], "\n")
	for i, line := range strings.Split(table, "\n") {
		require.Greater(t, len(written), i, "docs/CONFIG.md's table lacks %s: go generate ./app", line)
		require.Equal(t, line, written[i], "docs/CONFIG.md's table of keys is not Config.keys': go generate ./app")
	}
	require.Len(t, written, len(strings.Split(table, "\n")), "docs/CONFIG.md's table has rows no key has: go generate ./app")
}

// markdownTable returns the rows of the first table of doc after heading
// whose header names the columns: each row a map column → cell.
func markdownTable(t *testing.T, doc, heading string, columns ...string) []map[string]string {
	t.Helper()
	at := strings.Index(doc, "\n"+heading+"\n")
	require.GreaterOrEqual(t, at, 0, "no heading %q", heading)
	var header []string
	var rows []map[string]string
	for _, line := range strings.Split(doc[at:], "\n") {
		if !strings.HasPrefix(line, "|") {
			if header != nil && len(rows) > 0 {
				break // the end of the table
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case header == nil && slices.Contains(cells, columns[0]):
			header = cells
		case header != nil && strings.HasPrefix(cells[0], "`"):
			require.Len(t, cells, len(header), "%s row: %s", heading, line)
			row := map[string]string{}
			for i, c := range header {
				row[c] = cells[i]
			}
			rows = append(rows, row)
		}
	}
	for _, c := range columns {
		require.Contains(t, header, c, "the table after %q has no column %q", heading, c)
	}
	return rows
}

// sameDefault reports whether the written default is v: durations compare
// as durations ("2m" is "2m0s"), and empty text is written "empty", "none"
// or "none …".
func sameDefault(written string, v any) bool {
	want := formatValue(v)
	if want == "" {
		return written == "empty" || written == "none" || strings.HasPrefix(written, "none ") || strings.HasPrefix(written, "none:")
	}
	written = strings.Trim(written, "`")
	if d, ok := v.(time.Duration); ok {
		w, err := time.ParseDuration(written)
		return err == nil && d == w
	}
	return written == want
}

// contractKeys are the keys of the external contract (../shared/API.md when
// it was written), each with its default as the contract writes it: the
// declaration must keep each, under its name and environment variable.
var contractKeys = map[string]string{
	"database.url":                 "`postgres://postgres@127.0.0.1:5432/newsfeed?sslmode=disable`",
	"redis.url":                    "`redis://127.0.0.1:6379/0`",
	"http.addr":                    "`:8080`",
	"metrics.addr":                 "`:9090`",
	"auth.secret":                  "none: `serve` refuses to start without one, except with `--dev`",
	"feed.max_len":                 "`800`",
	"fanout.chunk_size":            "`5000`",
	"feed.backfill":                "`50`",
	"fanout.celebrity_threshold":   "`10000`",
	"redis.cluster":                "`false`",
	"redis.prefix":                 "`nf:`",
	"database.read_url":            "empty",
	"ratelimit.posts_per_minute":   "`60`",
	"ratelimit.follows_per_minute": "`300`",
	"http.request_timeout":         "`5s`",
}

// TestAPIDocConfigTable: docs/API.md's table of keys, the contract's,
// holds every declared key once, each with its environment variable and
// its default; and the declaration keeps every key of the contract. Rows
// are only ever added to it (their meanings are written for the contract,
// not generated).
func TestAPIDocConfigTable(t *testing.T) {
	t.Parallel()
	rows := markdownTable(t, readAPIDoc(t), "## Configuration", "key", "env", "default")
	seen := map[string]bool{}
	for _, row := range rows {
		key := strings.Trim(row["key"], "`")
		k, ok := declared[key]
		if !assert.True(t, ok, "docs/API.md's configuration table names %s, which is no configuration key", key) {
			continue
		}
		assert.False(t, seen[key], "docs/API.md lists %s twice", key)
		seen[key] = true
		assert.Equal(t, "`"+envName(key)+"`", row["env"], key)
		assert.True(t, sameDefault(row["default"], k.def), "docs/API.md says %s defaults to %s; the declaration says %q", key, row["default"], formatValue(k.def))
	}
	for _, key := range KnownKeys() {
		assert.True(t, seen[key], "docs/API.md's configuration table has no row for %s", key)
	}
	for key, def := range contractKeys {
		k, ok := declared[key]
		if assert.True(t, ok, "the contract's key %s is no longer declared", key) {
			assert.True(t, sameDefault(def, k.def), "the contract says %s defaults to %s; the declaration says %q", key, def, formatValue(k.def))
		}
	}
}

// TestKeysAreDeclared: every field of Config is a key, declared once, with
// what it does; a default of the field's type that passes its own bound.
func TestKeysAreDeclared(t *testing.T) {
	t.Parallel()
	fields := 0
	var count func(reflect.Type)
	count = func(typ reflect.Type) {
		for i := range typ.NumField() {
			if f := typ.Field(i).Type; f.Kind() == reflect.Struct && f != durationType {
				count(f)
			} else {
				fields++
			}
		}
	}
	count(reflect.TypeFor[Config]())
	require.Len(t, declared, fields)
	for key, k := range declared {
		require.NotEmpty(t, k.doc, key)
		require.Equal(t, k.field.Type(), reflect.TypeOf(k.def), key)
		require.Regexp(t, `^[a-z_]+(\.[a-z_]+)?$`, key)
	}
	_, err := LoadConfig(ConfigSources{})
	require.NoError(t, err, "the defaults pass their bounds")
}
