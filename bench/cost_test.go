package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// TestRedisCost: INFO's cpu and commandstats, read before and after, become
// CPU per unit on each primary; a primary that is another server after (a
// failover, a restart) is left out and named; replicas are summed apart.
func TestRedisCost(t *testing.T) {
	info := func(runID, sys, user, zadd string) string {
		return "# Server\r\nrun_id:" + runID + "\r\n# CPU\r\nused_cpu_sys:" + sys + "\r\nused_cpu_user:" + user +
			"\r\nused_cpu_sys_children:9.0\r\n# Commandstats\r\ncmdstat_zadd:calls=10,usec=" + zadd +
			",usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=1,usec=50,usec_per_call=50.00\r\n"
	}
	c := parseInfo(info("r1", "1.5", "2.5", "100"))
	require.Equal(t, "r1", c.runID)
	require.InDelta(t, 4.0, c.cpu, 1e-9)
	require.Equal(t, int64(100), c.usec["zadd"])
	require.Equal(t, int64(10), c.calls["zadd"])

	at := func(addr, s string) redisCounters { c := parseInfo(s); c.addr = addr; return c }
	before := map[string]redisCounters{
		"a:1":         at("a:1", info("r1", "1.0", "1.0", "100")),
		"b:2":         at("b:2", info("r2", "1.0", "1.0", "100")),
		"c:3":         at("c:3", info("r3", "1.0", "1.0", "100")),
		"replica d:4": at("replica d:4", info("r4", "1.0", "1.0", "0")),
	}
	after := map[string]redisCounters{
		"a:1":         at("a:1", info("r1", "1.5", "1.5", "1100")), // 1 s of CPU, 1 ms in ZADD
		"b:2":         at("b:2", info("r2", "1.25", "1.25", "600")),
		"c:3":         at("c:3", info("r9", "0.1", "0.1", "0")), // restarted
		"replica d:4": at("replica d:4", info("r4", "1.1", "1.1", "0")),
	}
	rc := redisCost(before, after, 1000, "entry")
	require.Equal(t, []string{"c:3"}, rc.Changed)
	require.Len(t, rc.Shards, 2)
	require.InDelta(t, 1000, rc.Shards[0].CPUPerUnit, 1e-6) // 1 s / 1000 entries = 1000 µs
	require.InDelta(t, 500, rc.Shards[1].CPUPerUnit, 1e-6)
	require.InDelta(t, 1500, rc.CPUPerUnit, 1e-6, "primaries only")
	require.InDelta(t, 200, rc.ReplicaCPUPerUnit, 1e-6)
	require.InDelta(t, 2.0/3, rc.Shards[0].Share, 1e-9)
	require.Equal(t, []string{"zadd 1.00"}, rc.Shards[0].Top, "INFO's own calls left out")
}

// TestRedisSnapshot reads the real server's counters, and those of every
// primary of the Redis Cluster when there is one.
func TestRedisSnapshot(t *testing.T) {
	ctx := context.Background()
	rdb, _ := testenv.NewRedis(t)
	snap, err := redisSnapshot(ctx, rdb)
	require.NoError(t, err)
	require.Len(t, snap, 1)
	for _, c := range snap {
		require.NotEmpty(t, c.runID)
		require.Positive(t, c.cpu)
	}
	if testenv.RedisClusterURL() == "" {
		return
	}
	cluster, _, _ := testenv.NewUniversalRedis(t)
	snap, err = redisSnapshot(ctx, cluster)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(snap), 2, "every primary")
}
