package queue_test

import (
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/queue"
)

// TestReadBoundedWhenRedisIsSilent: a worker's blocking read of a Redis
// that accepts and never answers returns, with an error, within its block
// time and a second — not when go-redis's read timeout (block + 10 s) or
// the client's (here a minute) would end it.
func TestReadBoundedWhenRedisIsSilent(t *testing.T) {
	t.Parallel()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() }) // read nothing, answer nothing
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ContextTimeoutEnabled: true,
		ReadTimeout: time.Minute, MaxRetries: -1, Protocol: 2})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, partitions := range []int{1, 4} {
		q, err := queue.NewPartitioned(rdb, queue.Config{Stream: "silent:tickets", Group: group, Partitions: partitions})
		require.NoError(t, err)
		start := time.Now()
		_, err = q.Read(t.Context(), "c1", 10, time.Second)
		took := time.Since(start)
		require.Error(t, err, "%d partitions", partitions)
		require.Less(t, took, 2500*time.Millisecond, "%d partitions: block 1 s + 1 s", partitions)
		t.Logf("%d partitions: gave up after %s: %v", partitions, took.Round(time.Millisecond), err)
	}
}
