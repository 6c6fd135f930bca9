// Package testenv gives each test its own PostgreSQL database (a copy of a
// template with the schema applied) and its own Redis key prefix or database,
// created on demand and removed in t.Cleanup, so that tests run in parallel
// against the real servers and a failed run leaves nothing behind. Databases
// that a killed run left are dropped by the next run after an hour.
//
// NEWSFEED_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres)
// and NEWSFEED_TEST_REDIS_URL (default redis://127.0.0.1:6379/0) name the servers.
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/store"
)

const dbPrefix = "nf_test_"

// DatabaseURL is the maintenance database tests connect to first.
func DatabaseURL() string {
	if u := os.Getenv("NEWSFEED_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// RedisURL is the Redis tests use.
func RedisURL() string {
	if u := os.Getenv("NEWSFEED_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Promtool returns the path of promtool (Debian's prometheus package, which
// `scripts/services.sh --promtool` installs, as `make test` does). Without it
// the test is skipped and says so, unless NEWSFEED_TEST_PROMTOOL=required
// (`make test` sets it, so that CI fails rather than pass without it).
func Promtool(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		const why = "promtool is not installed (scripts/services.sh --promtool installs it)"
		if os.Getenv("NEWSFEED_TEST_PROMTOOL") == "required" {
			t.Fatal(why + ", and NEWSFEED_TEST_PROMTOOL=required")
		}
		t.Skip(why)
	}
	return path
}

// migrationsDigest hashes the migration files, in order: a template is
// made once per set of migrations.
func migrationsDigest() (string, error) {
	h := sha256.New()
	files := store.Migrations()
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)[:6]), err
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// template creates, once per set of migrations, a database with the
// migrations applied that every test database is copied from.
func template(t testing.TB) string {
	t.Helper()
	templateOnce.Do(func() {
		digest, err := migrationsDigest()
		if err != nil {
			templateErr = fmt.Errorf("read the migrations: %w", err)
			return
		}
		templateName = "nf_template_" + digest
		templateErr = createTemplate(templateName)
	})
	if templateErr != nil {
		t.Fatalf("test database template: %v", templateErr)
	}
	return templateName
}

func createTemplate(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		return fmt.Errorf("connect to %s (is PostgreSQL running? `make services`): %w", DatabaseURL(), err)
	}
	defer conn.Close(ctx)
	// Test processes of several packages start at once: one creates the template.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(4242)"); err != nil {
		return err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(4242)") //nolint:errcheck
	dropStale(ctx, conn)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	build := name + "_build"
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+build+" WITH (FORCE)")
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+build); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, withDatabase(DatabaseURL(), build))
	if err != nil {
		return err
	}
	err = store.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "ALTER DATABASE "+build+" RENAME TO "+name)
	return err
}

// dropStale drops test databases older than an hour (a killed run's).
func dropStale(ctx context.Context, conn *pgx.Conn) {
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", dbPrefix+"%")
	if err != nil {
		return
	}
	names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, n := range names {
		parts := strings.Split(strings.TrimPrefix(n, dbPrefix), "_")
		created, err := strconv.ParseInt(parts[0], 10, 64)
		if err == nil && time.Since(time.Unix(created, 0)) > time.Hour {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
		}
	}
}

func withDatabase(dbURL, name string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic(fmt.Sprintf("NEWSFEED_TEST_DATABASE_URL: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

// NewDatabaseURL creates an empty-of-data database with the schema applied and
// returns its URL; the database is dropped when the test ends.
func NewDatabaseURL(t testing.TB) string {
	t.Helper()
	tmpl := template(t)
	name := fmt.Sprintf("%s%d_%s", dbPrefix, time.Now().Unix(), randomHex(4))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl)
		var pgErr *pgconn.PgError
		// The template is in use by a concurrent copy; try again.
		if err != nil && errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ObjectInUse && attempt < 50 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		break
	}
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, DatabaseURL())
		if err != nil {
			t.Errorf("drop test database: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database: %v", err)
		}
	})
	return withDatabase(DatabaseURL(), name)
}

// NewPool returns a pool on a new test database.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Pool(t, NewDatabaseURL(t))
}

// Pool opens a pool on url that closes when the test ends.
func Pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewRedis returns a client and a key prefix of the test's own; every key
// under the prefix is deleted when the test ends.
func NewRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	opts.PoolSize = 128
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("connect to %s (is Redis running? `make services`): %v", RedisURL(), err)
	}
	prefix := "nftest:" + randomHex(6) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		for start := 0; start < len(keys); start += 1000 {
			rdb.Del(ctx, keys[start:min(start+1000, len(keys))]...)
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

// NewRedisDB reserves a whole Redis database (1–15) for a test that must
// flush it, and returns its URL. It is flushed and released at the end.
func NewRedisDB(t testing.TB) string {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	ctl := redis.NewClient(opts)
	t.Cleanup(func() { _ = ctl.Close() })
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		for db := 1; db <= 15; db++ {
			lock := "nftest:dblock:" + strconv.Itoa(db)
			ok, err := ctl.SetNX(ctx, lock, "1", 10*time.Minute).Result()
			if err != nil {
				t.Fatalf("reserve redis db: %v", err)
			}
			if !ok {
				continue
			}
			o := *opts
			o.DB = db
			c := redis.NewClient(&o)
			c.FlushDB(ctx)
			t.Cleanup(func() {
				c.FlushDB(context.Background())
				_ = c.Close()
				ctl.Del(context.Background(), lock)
			})
			host := opts.Addr
			return fmt.Sprintf("redis://%s/%d", host, db)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no free Redis database for the test")
	return ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RedisClusterURL names the Redis Cluster that tests run against instead of
// one Redis when NEWSFEED_TEST_REDIS_CLUSTER_URL is set (`make cluster-up`;
// `eval "$(scripts/cluster.sh env)"` sets it): a redis:// URL with addr=
// parameters for the other seeds. Empty: one Redis.
func RedisClusterURL() string { return os.Getenv("NEWSFEED_TEST_REDIS_CLUSTER_URL") }

// SkipWithoutRedisCluster skips a test that means the Redis Cluster (slots
// on several nodes, replicas, failover) when RedisClusterURL names none.
func SkipWithoutRedisCluster(t testing.TB) {
	t.Helper()
	if RedisClusterURL() == "" {
		t.Skip("needs the Redis Cluster: make cluster-up; NEWSFEED_TEST_REDIS_CLUSTER_URL")
	}
}

// NewUniversalRedis is NewRedis on the Redis Cluster when RedisClusterURL is
// set, and on one Redis otherwise; cluster says which. Tests that accept
// either run against whichever the environment names.
func NewUniversalRedis(t testing.TB) (rdb redis.UniversalClient, prefix string, cluster bool) {
	t.Helper()
	url := RedisClusterURL()
	if url == "" {
		one, prefix := NewRedis(t)
		return one, prefix, false
	}
	opts, err := redis.ParseClusterURL(url)
	if err != nil {
		t.Fatalf("NEWSFEED_TEST_REDIS_CLUSTER_URL: %v", err)
	}
	opts.PoolSize = 128
	opts.ClusterStateReloadInterval = time.Second
	c := redis.NewClusterClient(opts)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("connect to the Redis Cluster at %s (`make cluster-up`): %v", url, err)
	}
	prefix = "nftest:" + randomHex(6) + ":"
	t.Cleanup(func() {
		_ = DeleteKeys(context.Background(), c, prefix+"*")
		_ = c.Close()
	})
	return c, prefix, true
}

// DeleteKeys deletes every key matching pattern, on one Redis or on every
// primary of a Redis Cluster (one key a DEL there: keys of other slots may
// not share a command).
func DeleteKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) error {
	del := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if err := node.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, del)
	case *redis.Client:
		return del(ctx, c)
	default:
		return fmt.Errorf("delete keys: unsupported client %T", rdb)
	}
}

// ReplicaURL names a streaming replica of the test PostgreSQL server when
// NEWSFEED_TEST_REPLICA_URL is set (`make cluster-up`; `eval "$(scripts/cluster.sh
// env)"` sets it). Empty: no replica, and the tests that need one skip.
func ReplicaURL() string { return os.Getenv("NEWSFEED_TEST_REPLICA_URL") }

// SkipWithoutReplica skips a test that needs the replica of ReplicaURL.
func SkipWithoutReplica(t testing.TB) {
	t.Helper()
	if ReplicaURL() == "" {
		t.Skip("no PostgreSQL replica: set NEWSFEED_TEST_REPLICA_URL (make cluster-up APPLY_DELAY=2s; eval \"$(scripts/cluster.sh env)\"); make test does")
	}
}

// ReplicaDatabaseURL returns the URL of the test database of dbURL (from
// NewDatabaseURL) on the replica of ReplicaURL: the replica's host, port and
// parameters, dbURL's database. Physical replication copies every database,
// so the replica has it once it has replayed its creation; this waits for
// that (the replica may lag on purpose).
func ReplicaDatabaseURL(t testing.TB, dbURL string) string {
	t.Helper()
	SkipWithoutReplica(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("database url: %v", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, ReplicaURL())
	if err != nil {
		t.Fatalf("connect to the replica at %s (`make cluster-up`): %v", ReplicaURL(), err)
	}
	defer conn.Close(ctx)
	for {
		var exists bool
		err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
		if err != nil {
			t.Fatalf("replica: wait for database %s: %v", name, err)
		}
		if exists {
			return withDatabase(ReplicaURL(), name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ReplicaApplyDelay returns the replica's recovery_min_apply_delay: how far
// behind the primary it stays on purpose (`make cluster-up APPLY_DELAY=2s`).
func ReplicaApplyDelay(t testing.TB) time.Duration {
	t.Helper()
	SkipWithoutReplica(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, ReplicaURL())
	if err != nil {
		t.Fatalf("connect to the replica at %s (`make cluster-up`): %v", ReplicaURL(), err)
	}
	defer conn.Close(ctx)
	var ms int64
	if err := conn.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'recovery_min_apply_delay'").Scan(&ms); err != nil {
		t.Fatalf("replica: recovery_min_apply_delay: %v", err)
	}
	return time.Duration(ms) * time.Millisecond
}
