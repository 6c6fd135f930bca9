package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/queue"
)

// The tests of this file kill and reshard nodes of the local Redis Cluster
// (make cluster-up), which every test of the cluster pass shares: they run
// only with NEWSFEED_TEST_CLUSTER_FAULTS set, alone (make test runs them
// after the cluster pass), and each ends with `scripts/cluster.sh up`, which
// restarts a killed node as a replica.

// needClusterFaults skips the test unless it may break the shared cluster.
func (c *cluster) needClusterFaults() {
	c.t.Helper()
	if !c.onCluster {
		c.t.Skip("needs the Redis Cluster: make cluster-up; NEWSFEED_TEST_REDIS_CLUSTER_URL")
	}
	if os.Getenv("NEWSFEED_TEST_CLUSTER_FAULTS") == "" {
		c.t.Skip("kills or reshards nodes of the shared cluster: NEWSFEED_TEST_CLUSTER_FAULTS=1, alone (make test does)")
	}
	testenv.HoldReplicas(c.t)
	c.t.Cleanup(c.restoreCluster)
}

// restoreCluster restarts the nodes that died (they rejoin as replicas) and
// waits until every primary has a replica again.
func (c *cluster) restoreCluster() {
	c.t.Helper()
	out, err := exec.Command("../scripts/cluster.sh", "up").CombinedOutput()
	if err != nil {
		c.t.Errorf("restore the cluster: %v\n%s", err, out)
	}
}

// startWithFollowers gives author n followers (users 1000 on) whose feeds
// are in Redis, and starts a serve, a dispatcher and two workers.
func (c *cluster) startWithFollowers(author int64, n int) (*proc, []int64) {
	c.t.Helper()
	followers := c.seedFollowers(author, 1000, n)
	c.markFeedsBuilt(followers)
	serve := c.start("serve")
	c.start("dispatch")
	c.start("work")
	c.start("work")
	return serve, followers
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string
	primary  bool
	failed   bool
	slots    int
}

func (c *cluster) clusterNodes(ctx context.Context, rdb *redis.ClusterClient) []clusterNode {
	c.t.Helper()
	var out string
	var err error
	for range 50 { // any node answers; one may just have died
		if out, err = rdb.ClusterNodes(ctx).Result(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(c.t, err)
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		n := clusterNode{id: f[0], addr: strings.Split(f[1], "@")[0]}
		n.primary = strings.Contains(f[2], "master")
		n.failed = strings.Contains(f[2], "fail")
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			lo, hi, found := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if found {
				b, _ = strconv.Atoi(hi)
			}
			n.slots += b - a + 1
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// waitFailedOver waits until every node that answers says cluster_state:ok
// and dead (the killed primary) is no longer a primary that owns slots.
func (c *cluster) waitFailedOver(ctx context.Context, rdb *redis.ClusterClient, dead string) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		promoted := true
		for _, n := range c.clusterNodes(ctx, rdb) {
			if n.addr == dead && n.primary && n.slots > 0 && !n.failed {
				promoted = false
			}
		}
		if promoted {
			if info, err := rdb.ClusterInfo(ctx).Result(); err == nil && strings.Contains(info, "cluster_state:ok") {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("no replica took over from %s within 60s", dead)
}

// requireEveryFeedHolds checks, in Redis, that every follower's feed holds
// every post, and over the API, for a sample of readers who follow nobody
// else, that the feed lists each exactly once, newest first, and nothing else.
func (c *cluster) requireEveryFeedHolds(serve *proc, followers, onlyThem []int64, posts []int64, sample int) {
	c.t.Helper()
	for _, id := range posts {
		require.Equal(c.t, len(followers), c.feedsHolding(followers, id), "feeds holding post %d", id)
	}
	want := slices.Clone(posts)
	slices.Reverse(want)
	for _, i := range rand.Perm(len(onlyThem))[:sample] {
		got := postIDs(serve.client(onlyThem[i]).feed())
		require.Equal(c.t, want, got, "the feed of %d: every post once, newest first", onlyThem[i])
	}
}

// A Redis primary — holding feeds and partitions of the queue — is killed
// with SIGKILL in the middle of a 20,000-follower fan-out (split into
// chunks), while posts go on being made, in the way that loses writes to
// asynchronous replication: its replica is stopped (SIGSTOP) and its link
// cut for a second first, so that the primary acknowledges writes its
// replica never gets,
// then the primary is killed and the replica goes on, and is promoted
// without them. With redis.wait_replicas 1 those writes never counted as
// done (their fan-out is postponed and done again on the new primary once
// it has a replica); every role follows the new topology without a restart,
// and when the outbox has drained every follower's feed holds every post
// exactly once. (With redis.wait_replicas 0 this test fails: feeds miss the
// posts whose writes the dead primary took.)
//
// Following the new topology has to be what completes the feeds, within
// seconds of the promotion: each timer that would have rescued a role stuck
// on the dead address is set far beyond the test's own deadline — the
// outbox's redelivery of a published row no worker finished
// (outbox.redeliver_after, 2m by default), the queue's takeover of tickets
// idle in a consumer's pending list (queue.claim_idle, 30s) and the
// dispatcher's lease on the rows it claimed (outbox.lease, 30s) — so that
// only postponed work tried again (at most backoff.MaxPostpone, 30s, apart)
// and clients that see the new primary can finish in time.
func TestRedisPrimaryKilledMidFanout(t *testing.T) {
	const partitions = 6
	c := newCluster(t, withEnv(
		"NEWSFEED_REDIS_WAIT_REPLICAS="+envOr("NEWSFEED_TEST_WAIT_REPLICAS", "1"),
		"NEWSFEED_QUEUE_PARTITIONS="+strconv.Itoa(partitions),
		"NEWSFEED_FANOUT_CONCURRENCY=16",
		"NEWSFEED_FANOUT_CELEBRITY_THRESHOLD=1000000", // fanned out, not pulled
		"NEWSFEED_OUTBOX_REDELIVER_AFTER="+noRescue.String(),
		"NEWSFEED_QUEUE_CLAIM_IDLE="+noRescue.String(),
		"NEWSFEED_OUTBOX_LEASE="+noRescue.String(),
	))
	c.needClusterFaults()
	c.requireDurations(noRescue, "outbox.redeliver_after", "queue.claim_idle", "outbox.lease")
	ctx := context.Background()
	rdb := c.redis().(*redis.ClusterClient)

	// The primary to kill holds partitions of the queue (the most of them,
	// on the cluster's slot map now) and feeds.
	q, err := queue.NewPartitioned(rdb, queue.Config{Stream: c.prefix + "tickets", Group: "fanout", Partitions: partitions})
	require.NoError(t, err)
	held := map[string][]int{} // primary address → the partitions whose stream it holds
	nodes := map[string]*redis.Client{}
	for p := range partitions {
		node, err := rdb.MasterForKey(ctx, q.Key(p))
		require.NoError(t, err)
		addr := node.Options().Addr
		held[addr], nodes[addr] = append(held[addr], p), node
	}
	var dead string
	for addr, parts := range held {
		if dead == "" || len(parts) > len(held[dead]) || len(parts) == len(held[dead]) && addr < dead {
			dead = addr
		}
	}
	victim := nodes[dead]

	const author = 1
	serve, followers := c.startWithFollowers(author, 20000)
	poster := serve.client(author)

	// The streams exist now (every process creates its partitions'), and
	// the victim answers for them itself: not a MOVED to another node.
	for _, p := range held[dead] {
		n, err := victim.Exists(ctx, q.Key(p)).Result()
		require.NoError(t, err, "the stream of partition %d on %s", p, dead)
		require.EqualValues(t, 1, n, "the stream of partition %d (%s) is on %s", p, q.Key(p), dead)
	}
	// The followers whose feeds are on the victim's slots, and the others:
	// the promotion moves no slot to another shard.
	var onVictim, elsewhere []int64
	for _, u := range followers {
		node, err := rdb.MasterForKey(ctx, c.feedKey(u))
		require.NoError(t, err)
		if node.Options().Addr == dead {
			onVictim = append(onVictim, u)
		} else {
			elsewhere = append(elsewhere, u)
		}
	}
	require.NotEmpty(t, onVictim, "no feed on %s", dead)
	require.NotEmpty(t, elsewhere, "every feed on %s", dead)

	var posts []int64
	for i := range 3 {
		posts = append(posts, poster.post("before the kill "+strconv.Itoa(i)).ID)
	}
	// Strike once the last of them is part-way through its fan-out.
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := c.feedsHolding(followers, posts[len(posts)-1])
		if n > 0 && n < len(followers) {
			break
		}
		require.Less(c.t, n, len(followers), "the fan-out ended before the kill could land in it; make it bigger")
		require.True(t, time.Now().Before(deadline), "the fan-out never started")
		time.Sleep(20 * time.Millisecond)
	}
	resume := testenv.StopReplicaOf(t, victim)
	// And cut its link: what the primary writes from now on is in no
	// socket buffer of the replica either.
	require.NoError(t, victim.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err())
	for i := range 2 {
		posts = append(posts, poster.post("with the replica stopped "+strconv.Itoa(i)).ID)
	}
	time.Sleep(time.Second) // writes reach the primary, not its replica
	var waiting int64
	for _, p := range held[dead] {
		n, err := victim.XLen(ctx, q.Key(p)).Result()
		require.NoError(t, err)
		waiting += n
	}
	require.NoError(t, syscall.Kill(testenv.RedisPID(t, dead), syscall.SIGKILL))
	resume()
	killed := time.Now()
	t.Logf("killed the primary %s mid fan-out, its replica a second behind: it held %d of the %d feeds, "+
		"partitions %v of the queue with %d tickets in them", dead, len(onVictim), len(followers), held[dead], waiting)

	// Posts go on while the replica takes over: writes need PostgreSQL alone.
	for i := range 5 {
		posts = append(posts, poster.post("during the failover "+strconv.Itoa(i)).ID)
		time.Sleep(200 * time.Millisecond)
	}
	c.waitFailedOver(ctx, rdb, dead)
	promoted := time.Now()
	t.Logf("a replica took over %s after the kill", promoted.Sub(killed).Round(time.Millisecond))
	for i := range 3 {
		posts = append(posts, poster.post("after the failover "+strconv.Itoa(i)).ID)
	}
	// The promoted primary has no replica: the writes to its shard do not
	// count until the dead node is back, as its replica. The other shards'
	// feeds do not wait for that: every page of the fan-out is written.
	last := posts[len(posts)-1]
	followed := promoted.Add(followWithin)
	require.Eventually(t, func() bool {
		n, err := c.countFeedsHolding(elsewhere, last) // the nodes may still disagree on the new topology
		return err == nil && n == len(elsewhere)
	}, time.Until(followed), 200*time.Millisecond,
		"the feeds on the shards with a replica got the post made after the failover within %s of the promotion", followWithin)
	t.Logf("the feeds on the other shards had every post %s after the promotion", time.Since(promoted).Round(time.Millisecond))
	// An operator's restart (here the cluster script's) brings the dead
	// node back as the new primary's replica.
	c.restoreCluster()
	restored := time.Now()
	t.Logf("the dead node is back as a replica %s after the promotion", restored.Sub(promoted).Round(time.Millisecond))

	// The roles follow the new topology themselves, long before any of the
	// timers above: postponed work is tried again within seconds.
	drained := promoted.Add(drainWithin)
	if late := restored.Add(drainAfterReturn); late.After(drained) {
		drained = late // the script took long: it may have rebuilt the PostgreSQL replica too
	}
	c.waitOutboxDrained(time.Until(drained))
	c.requireEveryFeedHolds(serve, followers, followers, posts, 30)
	t.Logf("the outbox drained and every feed held every post %s after the promotion (%s after the dead node was back)",
		time.Since(promoted).Round(time.Millisecond), time.Since(restored).Round(time.Millisecond))
	var events, retried, failed, maxFailures int
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE attempts > 1),
		count(*) FILTER (WHERE failures > 0), coalesce(max(failures), 0) FROM outbox`).Scan(&events, &retried, &failed, &maxFailures))
	t.Logf("of the %d outbox events, %d were published more than once, %d after failures (at most %d)", events, retried, failed, maxFailures)
}

// The failover test's bounds. noRescue is what the timers that rescue work
// after a timeout are set to: far beyond the test's deadlines (and its
// -timeout), so that none of them can finish a feed in time. followWithin
// bounds, from the promotion, how soon the feeds on the shards that kept a
// replica hold the posts made after it. drainWithin bounds, from the
// promotion too, how soon every event is finished and every feed complete,
// the promoted shard's included, whose writes count only once the cluster
// script has brought the dead node back as its replica (seconds); should
// the script take long (it may rebuild the PostgreSQL replica as well), the
// bound is drainAfterReturn from the node's return instead: postponed work
// is tried again at most backoff.MaxPostpone (30s) later. Measured runs take
// 30–50 s to drain on a loaded 2-core machine; every bound is far below
// noRescue.
const (
	noRescue         = 30 * time.Minute
	followWithin     = 60 * time.Second
	drainWithin      = 90 * time.Second
	drainAfterReturn = 60 * time.Second
)

// requireDurations checks, with `newsfeed config check`, that each key's
// effective value is want for the cluster's processes: a misspelt
// environment variable would be ignored, and leave the default.
func (c *cluster) requireDurations(want time.Duration, keys ...string) {
	c.t.Helper()
	out, err := c.run("config", "check", "--json")
	require.NoError(c.t, err)
	var checked struct {
		Settings []struct{ Key, Value string } `json:"settings"`
	}
	require.NoError(c.t, json.Unmarshal([]byte(out), &checked))
	for _, key := range keys {
		i := slices.IndexFunc(checked.Settings, func(s struct{ Key, Value string }) bool { return s.Key == key })
		require.GreaterOrEqual(c.t, i, 0, "config check lists no %s", key)
		got, err := time.ParseDuration(checked.Settings[i].Value)
		require.NoError(c.t, err, key)
		require.Equal(c.t, want, got, key)
	}
}

// envOr returns the test's environment variable key, or def.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// A third of the slots move from one primary to another with
// `redis-cli --cluster reshard` while posts, follows and reads flow: the
// clients follow MOVED and ASK, and at the end every feed is exactly right —
// every post of the people its reader follows, once, nothing of anyone else.
func TestReshardUnderLoad(t *testing.T) {
	c := newCluster(t, withEnv("NEWSFEED_REDIS_WAIT_REPLICAS=1", "NEWSFEED_QUEUE_PARTITIONS=6"))
	c.needClusterFaults()
	ctx := context.Background()
	rdb := c.redis().(*redis.ClusterClient)

	const author = 1
	serve, followers := c.startWithFollowers(author, 3000)

	// From the primary with the most slots to the one with the fewest, so
	// that runs after runs keep the cluster balanced enough.
	var from, to clusterNode
	for _, n := range c.clusterNodes(ctx, rdb) {
		if !n.primary || n.failed {
			continue
		}
		if from.id == "" || n.slots > from.slots {
			from = n
		}
		if to.id == "" || n.slots < to.slots {
			to = n
		}
	}
	require.NotEqual(t, from.id, to.id)
	moving := 16384 / 3
	require.GreaterOrEqual(t, from.slots, moving, "the primary with the most slots has fewer than a third")

	// Afterwards the slots are spread evenly again, for the tests that
	// follow (a queue's partitions are expected on every shard).
	t.Cleanup(func() {
		if out, err := exec.Command("redis-cli", "--cluster", "rebalance", from.addr, "--cluster-yes").CombinedOutput(); err != nil {
			t.Errorf("redis-cli --cluster rebalance: %v\n%s", err, out)
		}
	})
	reshard := exec.Command("redis-cli", "--cluster", "reshard", from.addr,
		"--cluster-from", from.id, "--cluster-to", to.id, "--cluster-slots", strconv.Itoa(moving),
		"--cluster-yes", "--cluster-pipeline", "100")
	var reshardOut strings.Builder
	reshard.Stdout, reshard.Stderr = &reshardOut, &reshardOut
	require.NoError(t, reshard.Start())
	resharded := make(chan error, 1)
	go func() { resharded <- reshard.Wait() }()
	started := time.Now()

	// The load, paced so that redis-cli gets its share of the 2 cores and
	// feeds stay under feed.max_len: every 50 ms a follow or an unfollow of
	// a second author by one of 50 readers, or a feed read; a post by each
	// author every second — until the reshard is over, and a second more.
	const other = 2
	var posts, otherPosts []int64
	followsOther := map[int64]bool{}
	r := rand.New(rand.NewPCG(1, 2))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i, after := 0, 0; after < 20; i++ {
		<-tick.C
		select {
		case err := <-resharded:
			require.NoError(t, err, "redis-cli --cluster reshard:\n%s", reshardOut.String())
			t.Logf("moved %d slots from %s to %s in %s, %d posts made meanwhile", moving, from.addr, to.addr,
				time.Since(started).Round(time.Millisecond), len(posts)+len(otherPosts))
			after = 1
		default:
			if after > 0 {
				after++
			}
		}
		switch {
		case i%20 == 0:
			posts = append(posts, serve.client(author).post("during the reshard "+strconv.Itoa(i)).ID)
		case i%20 == 10:
			otherPosts = append(otherPosts, serve.client(other).post("other author "+strconv.Itoa(i)).ID)
		case i%2 == 0:
			u := followers[r.IntN(50)]
			if followsOther[u] {
				status, out := serve.client(u).do("DELETE", "/v1/following/"+strconv.Itoa(other), nil)
				require.Equal(t, 204, status, string(out))
			} else {
				serve.client(u).follow(other)
			}
			followsOther[u] = !followsOther[u]
		default:
			serve.client(followers[r.IntN(len(followers))]).firstPage(20)
		}
		require.Less(t, time.Since(started), 8*time.Minute, "the reshard did not end:\n%s", reshardOut.String())
	}
	require.Contains(t, reshardOut.String(), "Moving slot", "nothing moved:\n%s", reshardOut.String())

	c.waitOutboxDrained(90 * time.Second)
	c.requireEveryFeedHolds(serve, followers, followers[50:], posts, 20)
	// Those who follow the other author at the end have all of their posts
	// too (backfill, then pushes), those who do not have none.
	for u, follows := range followsOther {
		got := postIDs(serve.client(u).feed())
		for _, id := range otherPosts {
			require.Equal(t, follows, slices.Contains(got, id), fmt.Sprintf("reader %d (follows the other author: %v), post %d", u, follows, id))
		}
		require.Len(t, got, len(posts)+map[bool]int{true: len(otherPosts)}[follows], "reader %d: each post once", u)
	}
}
