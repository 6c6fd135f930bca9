package queue_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// A backend is a Redis the partition tests run on: the single Redis of
// testenv, and a Redis Cluster when one answers.
type backend struct {
	name    string
	cluster bool
	// open returns a client and a key prefix of the test's own; every key
	// under the prefix is deleted when the test ends.
	open func(t *testing.T) (redis.UniversalClient, string)
}

// backends returns the single Redis and, if it answers, the Redis Cluster of
// NEWSFEED_TEST_REDIS_CLUSTER_URL (default redis://127.0.0.1:7000, the local
// cluster of `make cluster-up`).
func backends(t *testing.T) []backend {
	t.Helper()
	single := backend{name: "redis", open: func(t *testing.T) (redis.UniversalClient, string) {
		rdb, prefix := testenv.NewRedis(t)
		return rdb, prefix
	}}
	if clusterOpts() == nil {
		return []backend{single}
	}
	return []backend{single, {name: "cluster", cluster: true, open: openCluster}}
}

// forEachBackend runs f as a subtest on every backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

var (
	clusterOnce sync.Once
	clusterUp   *redis.ClusterOptions
)

// clusterOpts returns the options of the test cluster, or nil when none
// answers (checked once per test binary).
func clusterOpts() *redis.ClusterOptions {
	clusterOnce.Do(func() {
		url := os.Getenv("NEWSFEED_TEST_REDIS_CLUSTER_URL")
		if url == "" {
			url = "redis://127.0.0.1:7000"
		}
		opts, err := redis.ParseClusterURL(url)
		if err != nil {
			return
		}
		opts.DialTimeout = time.Second
		rdb := redis.NewClusterClient(opts)
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		info, err := rdb.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return
		}
		clusterUp = opts
	})
	return clusterUp
}

// requireCluster skips the test when no cluster answers.
func requireCluster(t *testing.T) {
	t.Helper()
	if clusterOpts() == nil {
		t.Skip("no Redis Cluster answers (NEWSFEED_TEST_REDIS_CLUSTER_URL, default redis://127.0.0.1:7000; `make cluster-up`)")
	}
}

func openCluster(t *testing.T) (redis.UniversalClient, string) {
	t.Helper()
	requireCluster(t)
	opts := *clusterOpts()
	opts.PoolSize = 64
	rdb := redis.NewClusterClient(&opts)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "nftest:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		_ = rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				node.Del(ctx, iter.Val())
			}
			return nil
		})
		_ = rdb.Close()
	})
	return rdb, prefix
}
