package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/backoff"
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
// replica never gets, then the primary is killed and the replica goes on,
// and is promoted without them. The test shows they are lost, not assumed:
// the promoted node's history ends where the dead primary's stream was at
// the cut (second_repl_offset), a key written after the cut is missing
// there, and the fan-out had written feed entries on the dead primary after
// the cut (counted there before the kill). With redis.wait_replicas 1 those writes never counted as
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
	// Where the replica was left: the primary's replication stream, the
	// feed entries its feeds hold, and a key the test writes there now.
	cut := replicationOf(t, victim)
	heldAtCut := c.entriesOn(victim, onVictim, posts)
	canary := c.keyOn(rdb, dead, "written-after-the-cut")
	require.NoError(t, victim.Set(ctx, canary, "acknowledged by the primary alone", time.Hour).Err())
	for i := range 2 {
		posts = append(posts, poster.post("with the replica stopped "+strconv.Itoa(i)).ID)
	}
	// Writes reach the primary, not its replica: wait until the fan-out
	// wrote feed entries there (a fan-out that was quick to end before
	// the cut leaves it to the two posts above).
	for wait := time.Now().Add(30 * time.Second); c.entriesOn(victim, onVictim, posts) <= heldAtCut; {
		require.True(t, time.Now().Before(wait), "the fan-out wrote no feed entry on %s after the cut", dead)
		time.Sleep(50 * time.Millisecond)
	}
	var waiting int64
	for _, p := range held[dead] {
		n, err := victim.XLen(ctx, q.Key(p)).Result()
		require.NoError(t, err)
		waiting += n
	}
	heldAtKill := c.entriesOn(victim, onVictim, posts)
	atKill := replicationOf(t, victim)
	require.NoError(t, syscall.Kill(testenv.RedisPID(t, dead), syscall.SIGKILL))
	resume()
	killed := time.Now()
	t.Logf("killed the primary %s mid fan-out, its replica a second behind: it held %d of the %d feeds, "+
		"partitions %v of the queue with %d tickets in them", dead, len(onVictim), len(followers), held[dead], waiting)

	// Posts go on while the replica takes over: writes need PostgreSQL alone.
	firstAfterKill := len(posts)
	for i := range 5 {
		posts = append(posts, poster.post("during the failover "+strconv.Itoa(i)).ID)
		time.Sleep(200 * time.Millisecond)
	}
	c.waitFailedOver(ctx, rdb, dead)
	promoted := time.Now()
	t.Logf("a replica took over %s after the kill", promoted.Sub(killed).Round(time.Millisecond))
	// The writes the dead primary acknowledged after the cut are not on the
	// replica that took over: its history is the dead primary's up to the
	// cut at most (Redis notes where a promoted replica's own history
	// starts: second_repl_offset, one past the last byte it had), and the
	// key the test wrote after the cut is missing there. The fan-out had
	// written feed entries meanwhile: those are lost too, and every one of
	// them has to come back (the checks at the end).
	successor := c.successorOf(ctx, rdb, dead, canary)
	took := replicationOf(t, successor)
	require.Equal(t, cut.id, took.id2, "the promoted node %s was the dead primary's replica", successor.Options().Addr)
	require.Greater(t, atKill.offset, cut.offset, "the dead primary wrote after the cut")
	require.LessOrEqual(t, took.second-1, cut.offset, "the promoted node took nothing the dead primary wrote after the cut")
	require.ErrorIs(t, successor.Get(ctx, canary).Err(), redis.Nil, "the key written after the cut is lost with the dead primary")
	require.Greater(t, heldAtKill, heldAtCut, "the fan-out wrote feed entries on the dead primary after the cut")
	t.Logf("lost with the dead primary: %d bytes of its replication stream (the promoted %s stopped at offset %d, the dead primary was at %d), "+
		"%d feed entries the fan-out wrote there after the cut among them", atKill.offset-(took.second-1),
		successor.Options().Addr, took.second-1, atKill.offset, heldAtKill-heldAtCut)
	for i := range 3 {
		posts = append(posts, poster.post("after the failover "+strconv.Itoa(i)).ID)
	}
	// Every role dials the promoted primary within seconds (its slot map is
	// reloaded every second), though it has no replica yet: the dispatcher
	// writes tickets to the partitions it holds (and, their wait for a
	// replica failing, again to partitions elsewhere), and the workers write
	// the posts made since the kill to the feeds it holds (their wait fails
	// too: the event is postponed). Both are seen on the promoted node, which
	// can only have them from after the promotion: a ticket id is the time it
	// was written at, and those posts were made after the kill.
	//
	// The writes to its shard do not count until the dead node is back, as
	// its replica. The other shards' feeds do not wait for that: every page
	// of the fan-out is written, and they get the post made after the
	// failover within followWithin of the promotion.
	last := posts[len(posts)-1]
	sinceKill := slices.Clone(posts[firstAfterKill:])
	var dispatched, pushed, allElsewhere time.Duration
	lacking := elsewhere // the feeds on the other shards still without the post; a feed that has it keeps it
	for dispatched == 0 || pushed == 0 || allElsewhere == 0 {
		since := time.Since(promoted)
		require.True(t, since < dialWithin || dispatched > 0 && pushed > 0,
			"within %s of the promotion, the dispatcher should have written a ticket (%v) and the workers a feed entry (%v) on the promoted primary %s",
			dialWithin, dispatched > 0, pushed > 0, successor.Options().Addr)
		require.Less(t, since, followWithin,
			"within %s of the promotion, every feed on the shards that kept a replica should hold the post made after the failover: %d of %d lack it",
			followWithin, len(lacking), len(elsewhere))
		// The nodes may still disagree on the new topology: errors are
		// tried again.
		if dispatched == 0 && c.ticketWrittenAfter(ctx, successor, q, held[dead], killed) {
			dispatched = since
		}
		if pushed == 0 {
			if still, err := c.feedsLackingAll(ctx, successor, onVictim, sinceKill); err == nil && len(still) < len(onVictim) {
				pushed = since
			}
		}
		if allElsewhere == 0 {
			if still, err := c.feedsLacking(ctx, rdb, lacking, last); err == nil {
				if lacking = still; len(lacking) == 0 {
					allElsewhere = since
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after the promotion: the first ticket on the promoted primary after %s, the first feed entry after %s; every feed on the other shards had the post made after the failover after %s",
		dispatched.Round(time.Millisecond), pushed.Round(time.Millisecond), allElsewhere.Round(time.Millisecond))
	// An operator's restart (here the cluster script's) brings the dead
	// node back as the new primary's replica.
	c.restoreCluster()
	restored := time.Now()
	t.Logf("the dead node is back as a replica %s after the promotion", restored.Sub(promoted).Round(time.Millisecond))

	// The roles follow the new topology themselves, long before any of the
	// timers above: the work postponed while the promoted shard had no
	// replica is tried again at most backoff.MaxPostpone after the
	// replica's return, and done then.
	c.waitOutboxDrained(time.Until(restored.Add(drainAfterReturn)))
	c.requireEveryFeedHolds(serve, followers, followers, posts, 30)
	t.Logf("the outbox drained and every feed held every post %s after the promotion (%s after the dead node was back)",
		time.Since(promoted).Round(time.Millisecond), time.Since(restored).Round(time.Millisecond))
	var events, retried, failed, maxFailures int
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE attempts > 1),
		count(*) FILTER (WHERE failures > 0), coalesce(max(failures), 0) FROM outbox`).Scan(&events, &retried, &failed, &maxFailures))
	t.Logf("of the %d outbox events, %d were published more than once, %d after failures (at most %d)", events, retried, failed, maxFailures)
}

// replication is where a node's replication stream is (INFO replication).
type replication struct {
	id, id2 string // master_replid, master_replid2 (the history it took over)
	offset  int64  // master_repl_offset
	second  int64  // second_repl_offset: where its own history starts, -1 for none
}

func replicationOf(t *testing.T, node *redis.Client) replication {
	t.Helper()
	info, err := node.Info(context.Background(), "replication").Result()
	require.NoError(t, err, "INFO replication of %s", node.Options().Addr)
	var r replication
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "master_replid":
			r.id = v
		case "master_replid2":
			r.id2 = v
		case "master_repl_offset":
			r.offset, err = strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, line)
		case "second_repl_offset":
			r.second, err = strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, line)
		}
	}
	require.NotEmpty(t, r.id, "INFO replication of %s:\n%s", node.Options().Addr, info)
	return r
}

// entriesOn counts the entries of posts that users' feeds hold on node,
// the primary of all of them.
func (c *cluster) entriesOn(node *redis.Client, users, posts []int64) int {
	c.t.Helper()
	n := 0
	for start := 0; start < len(users); start += 1000 {
		feeds, err := feed.InspectMany(context.Background(), node, c.prefix, users[start:min(start+1000, len(users))])
		require.NoError(c.t, err, "the feeds on %s", node.Options().Addr)
		for _, f := range feeds {
			for _, id := range posts {
				if f.Has(id) {
					n++
				}
			}
		}
	}
	return n
}

// feedsLackingAll returns those of users whose feed on node (their primary)
// holds none of posts, or the first Redis error.
func (c *cluster) feedsLackingAll(ctx context.Context, node *redis.Client, users, posts []int64) ([]int64, error) {
	var lacking []int64
	for start := 0; start < len(users); start += 1000 {
		batch := users[start:min(start+1000, len(users))]
		feeds, err := feed.InspectMany(ctx, node, c.prefix, batch)
		if err != nil {
			return nil, err
		}
		for i, f := range feeds {
			if !slices.ContainsFunc(posts, f.Has) {
				lacking = append(lacking, batch[i])
			}
		}
	}
	return lacking, nil
}

// ticketWrittenAfter reports whether one of the partitions' streams on node
// had an entry added after at: an entry id is the time (ms) it was added
// at, and a stream keeps its last one (last-generated-id) when the entry
// is acknowledged and deleted.
func (c *cluster) ticketWrittenAfter(ctx context.Context, node *redis.Client, q *queue.Queue, parts []int, at time.Time) bool {
	for _, p := range parts {
		info, err := node.XInfoStream(ctx, q.Key(p)).Result()
		if err != nil {
			continue
		}
		ms, _, _ := strings.Cut(info.LastGeneratedID, "-")
		if v, err := strconv.ParseInt(ms, 10, 64); err == nil && v > at.UnixMilli() {
			return true
		}
	}
	return false
}

// feedsLacking returns those of users whose feed in Redis does not hold
// postID, or the first Redis error.
func (c *cluster) feedsLacking(ctx context.Context, rdb *redis.ClusterClient, users []int64, postID int64) ([]int64, error) {
	var lacking []int64
	for start := 0; start < len(users); start += 1000 {
		batch := users[start:min(start+1000, len(users))]
		feeds, err := feed.InspectMany(ctx, rdb, c.prefix, batch)
		if err != nil {
			return nil, fmt.Errorf("look for post %d in feeds: %w", postID, err)
		}
		for i, f := range feeds {
			if !f.Has(postID) {
				lacking = append(lacking, batch[i])
			}
		}
	}
	return lacking, nil
}

// keyOn returns a key of the test's whose slot the primary at addr owns.
func (c *cluster) keyOn(rdb *redis.ClusterClient, addr, name string) string {
	c.t.Helper()
	for i := range 1000 {
		key := c.prefix + name + ":{" + strconv.Itoa(i) + "}"
		node, err := rdb.MasterForKey(context.Background(), key)
		require.NoError(c.t, err)
		if node.Options().Addr == addr {
			return key
		}
	}
	c.t.Fatalf("no key of 1,000 tried is on %s", addr)
	return ""
}

// successorOf returns the primary that owns key's slot now that dead is
// no longer a primary (the client's slot map is reloaded every second).
func (c *cluster) successorOf(ctx context.Context, rdb *redis.ClusterClient, dead, key string) *redis.Client {
	c.t.Helper()
	var node *redis.Client
	require.Eventually(c.t, func() bool {
		var err error
		node, err = rdb.MasterForKey(ctx, key)
		return err == nil && node.Options().Addr != dead
	}, 10*time.Second, 50*time.Millisecond, "the client's slot map still names %s", dead)
	return node
}

// The failover test's bounds. noRescue is what the timers that rescue work
// after a timeout are set to: far beyond the test's deadlines (and its
// -timeout), so that none of them can finish a feed in time.
//
// dialWithin bounds, from the promotion, how soon the dispatcher and the
// workers write to the promoted primary: what "every role follows the new
// topology within seconds" promises. Clients reload the slot map every
// second; postponed work is tried again after about a second at first.
//
// followWithin bounds, from the promotion, how soon every feed on the
// shards that kept a replica holds the post made after the failover. It is
// the time to fan out a 20,000-follower post (four chunks) queued behind
// the retries of the ten posts made before, every page of them waiting
// redis.wait_timeout (1 s) for the promoted shard's missing replica: a
// matter of throughput, not of topology. Measured: 12.6–13.6 s on a quiet
// machine, 21–38 s on the 2 cores loaded by other work (load average 8).
//
// drainAfterReturn bounds, from the dead node's return as the promoted
// primary's replica, how soon every event is finished and every feed
// complete, the promoted shard's included, whose writes count only once
// that replica has them: postponed work is tried again at most
// backoff.MaxPostpone (30 s) later, and then fanned out again, idempotently.
// Measured: 16–19 s after the return on a quiet machine, 29–36 s loaded.
const (
	noRescue         = 30 * time.Minute
	dialWithin       = 10 * time.Second
	followWithin     = 60 * time.Second
	drainAfterReturn = backoff.MaxPostpone + 30*time.Second
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
// `redis-cli --cluster reshard` while posts, follows and reads flow from
// several clients at once. The nodes count the redirections they answer
// (INFO errorstats: MOVED for a key whose slot has moved, ASK for one that
// left a slot still being moved, TRYAGAIN for a script whose keys the move
// split), and the product's processes are the only clients that send
// commands meanwhile: the test requires that they met some and, by the end,
// that every feed is exactly right — every post of the people its reader
// follows, once, nothing of anyone else. The slot map before and after says
// what moved: a third of the slots, and with them feeds of the readers and
// partitions of the queue in use.
func TestReshardUnderLoad(t *testing.T) {
	c := newCluster(t, withEnv("NEWSFEED_REDIS_WAIT_REPLICAS=1", "NEWSFEED_QUEUE_PARTITIONS="+strconv.Itoa(reshardPartitions)))
	c.needClusterFaults()
	ctx := context.Background()
	rdb := c.redis().(*redis.ClusterClient)

	const author, other = 1, 2
	serve, followers := c.startWithFollowers(author, 3000)

	// From the primary with the most slots to the one with the fewest, so
	// that runs after runs keep the cluster balanced enough.
	var from, to clusterNode
	nodes := c.clusterNodes(ctx, rdb)
	for _, n := range nodes {
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
	ownersBefore := c.slotOwners(ctx, rdb)
	redirectsBefore := c.redirections(nodes)
	reshard := exec.Command("redis-cli", "--cluster", "reshard", from.addr,
		"--cluster-from", from.id, "--cluster-to", to.id, "--cluster-slots", strconv.Itoa(moving),
		"--cluster-yes", "--cluster-pipeline", "100")
	var reshardOut strings.Builder
	reshard.Stdout, reshard.Stderr = &reshardOut, &reshardOut
	require.NoError(t, reshard.Start())
	resharded := make(chan error, 1)
	go func() { resharded <- reshard.Wait() }()
	started := time.Now()

	// The load, from 6 clients at once until the reshard is over and a
	// second more: the author posts every 250 ms (at most maxPosts, so that
	// the fan-out of 3,000 followers a post drains in time), a second author
	// every 500 ms; two clients follow and unfollow the second author as 25
	// readers each, every 50 ms; two read first pages of feeds, every 20 ms.
	// Paced so that redis-cli still gets its share of the 2 cores: the
	// product runs with the race detector. Their checks are reported from
	// their own goroutines (load.errors) and fail the test once the load is
	// over.
	load := &recordingT{TB: t}
	as := func(u int64) *client { cl := serve.client(u); cl.t = load; return cl }
	stop := make(chan struct{})
	running := func(pause time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(pause):
			return true
		}
	}
	var mu sync.Mutex
	var posts, otherPosts []int64
	followsOther := map[int64]bool{}
	var changes, reads atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		poster := as(author)
		for i := 0; len(posts) < maxPosts && running(250*time.Millisecond); i++ {
			id := poster.post("during the reshard " + strconv.Itoa(i)).ID
			mu.Lock()
			posts = append(posts, id)
			mu.Unlock()
		}
	})
	wg.Go(func() {
		poster := as(other)
		for i := 0; running(500 * time.Millisecond); i++ {
			id := poster.post("other author " + strconv.Itoa(i)).ID
			mu.Lock()
			otherPosts = append(otherPosts, id)
			mu.Unlock()
		}
	})
	for g := range 2 {
		readers := followers[25*g : 25*(g+1)] // each reader's follows on one goroutine: in order
		r := rand.New(rand.NewPCG(1, uint64(g)))
		wg.Go(func() {
			for running(50 * time.Millisecond) {
				u := readers[r.IntN(len(readers))]
				mu.Lock()
				follows := followsOther[u]
				mu.Unlock()
				if follows {
					status, out := as(u).do("DELETE", "/v1/following/"+strconv.Itoa(other), nil)
					require.Equal(load, 204, status, string(out))
				} else {
					as(u).follow(other)
				}
				mu.Lock()
				followsOther[u] = !follows
				mu.Unlock()
				changes.Add(1)
			}
		})
		r2 := rand.New(rand.NewPCG(2, uint64(g)))
		wg.Go(func() {
			for running(20 * time.Millisecond) {
				as(followers[50+r2.IntN(len(followers)-50)]).firstPage(20)
				reads.Add(1)
			}
		})
	}
	var took time.Duration
	select {
	case err := <-resharded:
		took = time.Since(started)
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
		require.NoError(t, err, "redis-cli --cluster reshard:\n%s", reshardOut.String())
	case <-time.After(8 * time.Minute):
		close(stop)
		wg.Wait()
		t.Fatalf("the reshard did not end:\n%s", reshardOut.String())
	}
	require.Empty(t, load.errors, "the load's clients")
	require.Contains(t, reshardOut.String(), "Moving slot", "nothing moved:\n%s", reshardOut.String())
	redirects := c.redirections(nodes).minus(redirectsBefore)

	// What moved: a third of the slots, from one primary to the other,
	// and with them readers' feeds and partitions of the queue.
	ownersAfter := c.slotOwners(ctx, rdb)
	moved := map[int]bool{}
	for slot, owner := range ownersAfter {
		if owner != ownersBefore[slot] {
			require.Equal(t, from.addr+" → "+to.addr, ownersBefore[slot]+" → "+owner, "slot %d", slot)
			moved[slot] = true
		}
	}
	require.Len(t, moved, moving, "slots that changed owner")
	q, err := queue.NewPartitioned(rdb, queue.Config{Stream: c.prefix + "tickets", Group: "fanout", Partitions: reshardPartitions})
	require.NoError(t, err)
	var feedKeys, partKeys []string
	for _, u := range followers {
		feedKeys = append(feedKeys, c.feedKey(u))
	}
	for p := range reshardPartitions {
		partKeys = append(partKeys, q.Key(p))
	}
	movedFeeds, movedParts := 0, []int{}
	for _, slot := range c.slotsOf(ctx, from.addr, feedKeys) {
		if moved[slot] {
			movedFeeds++
		}
	}
	for p, slot := range c.slotsOf(ctx, from.addr, partKeys) {
		if moved[slot] {
			movedParts = append(movedParts, p)
		}
	}
	require.Positive(t, movedFeeds, "no reader's feed was in the slots moved")
	t.Logf("moved %d slots from %s to %s in %s; meanwhile %d posts by the author (to 3,000 followers each), %d by the other, "+
		"%d follows and unfollows, %d feed reads", moving, from.addr, to.addr, took.Round(time.Millisecond),
		len(posts), len(otherPosts), changes.Load(), reads.Load())
	t.Logf("among the slots moved: the feeds of %d of the 3,000 followers, partitions %v of the %d of the queue", movedFeeds, movedParts, reshardPartitions)
	t.Logf("redirections the nodes answered meanwhile (INFO errorstats): %d MOVED, %d ASK, %d TRYAGAIN; by node: %s",
		redirects.total("MOVED"), redirects.total("ASK"), redirects.total("TRYAGAIN"), redirects)
	require.Positive(t, redirects.total("MOVED")+redirects.total("ASK"), "the product's commands met no redirection during the reshard")

	c.waitOutboxDrained(2 * time.Minute)
	// In Redis, the feeds of the readers who follow the author alone; not
	// those of the 50 who followed the other author meanwhile: a follow of
	// an author with more than feed.backfill posts leaves in the feed only
	// what is at or above the oldest post merged (the rest is read from
	// PostgreSQL), and an unfollow may drop a feed that keeps changing, to
	// be rebuilt by the next read. Theirs are checked over the API.
	c.requireEveryFeedHolds(serve, followers[50:], followers[50:], posts, 20)
	// Those who follow the other author at the end have all of their posts
	// too (backfill, then pushes), those who do not have none.
	for u, follows := range followsOther {
		got := postIDs(serve.client(u).feed())
		for _, id := range otherPosts {
			require.Equal(t, follows, slices.Contains(got, id), fmt.Sprintf("reader %d (follows the other author: %v), post %d", u, follows, id))
		}
		require.Len(t, got, len(posts)+map[bool]int{true: len(otherPosts)}[follows], "reader %d: each post once", u)
	}
	var events, failed int
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE failures > 0) FROM outbox`).Scan(&events, &failed))
	t.Logf("of the %d outbox events, %d failed once or more and were tried again (TRYAGAIN, a page that met a move)", events, failed)
}

// The reshard test's load: the queue's partitions, and the most posts the
// author makes (3,000 followers each: the fan-out drains in time, and the
// 50 readers' feeds stay under feed.max_len with the other author's).
const (
	reshardPartitions = 6
	maxPosts          = 60
)

// slotOwners returns the address of each slot's primary (CLUSTER SHARDS).
func (c *cluster) slotOwners(ctx context.Context, rdb *redis.ClusterClient) map[int]string {
	c.t.Helper()
	shards, err := rdb.ClusterShards(ctx).Result()
	require.NoError(c.t, err)
	owners := make(map[int]string, 16384)
	for _, sh := range shards {
		i := slices.IndexFunc(sh.Nodes, func(n redis.Node) bool { return n.Role == "master" })
		if i < 0 || len(sh.Slots) == 0 {
			continue
		}
		addr := net.JoinHostPort(sh.Nodes[i].IP, strconv.FormatInt(sh.Nodes[i].Port, 10))
		for _, r := range sh.Slots {
			for slot := r.Start; slot <= r.End; slot++ {
				owners[int(slot)] = addr
			}
		}
	}
	require.Len(c.t, owners, 16384, "every slot has an owner")
	return owners
}

// slotsOf returns each key's slot (CLUSTER KEYSLOT, asked of the node at addr).
func (c *cluster) slotsOf(ctx context.Context, addr string, keys []string) []int {
	c.t.Helper()
	node := redis.NewClient(&redis.Options{Addr: addr})
	defer node.Close()
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.ClusterKeySlot(ctx, k)
		}
		return nil
	})
	require.NoError(c.t, err)
	slots := make([]int, len(keys))
	for i, cmd := range cmds {
		slots[i] = int(cmd.Val())
	}
	return slots
}

// redirectCounts is, per node address, how many redirections of each kind
// (MOVED, ASK, TRYAGAIN) it answered.
type redirectCounts map[string]map[string]int64

// redirections reads the counts of every node (INFO errorstats:
// errorstat_MOVED:count=12).
func (c *cluster) redirections(nodes []clusterNode) redirectCounts {
	c.t.Helper()
	counts := redirectCounts{}
	for _, n := range nodes {
		node := redis.NewClient(&redis.Options{Addr: n.addr})
		info, err := node.Info(context.Background(), "errorstats").Result()
		_ = node.Close()
		require.NoError(c.t, err, "INFO errorstats of %s", n.addr)
		counts[n.addr] = map[string]int64{}
		for _, line := range strings.Split(info, "\n") {
			kind, rest, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "errorstat_")), ":count=")
			if !ok || !slices.Contains([]string{"MOVED", "ASK", "TRYAGAIN"}, kind) {
				continue
			}
			v, err := strconv.ParseInt(rest, 10, 64)
			require.NoError(c.t, err, line)
			counts[n.addr][kind] = v
		}
	}
	return counts
}

func (r redirectCounts) minus(before redirectCounts) redirectCounts {
	out := redirectCounts{}
	for addr, kinds := range r {
		out[addr] = map[string]int64{}
		for kind, v := range kinds {
			out[addr][kind] = v - before[addr][kind]
		}
	}
	return out
}

func (r redirectCounts) total(kind string) int64 {
	var n int64
	for _, kinds := range r {
		n += kinds[kind]
	}
	return n
}

func (r redirectCounts) String() string {
	var parts []string
	for addr, kinds := range r {
		if kinds["MOVED"]+kinds["ASK"]+kinds["TRYAGAIN"] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d/%d/%d", addr, kinds["MOVED"], kinds["ASK"], kinds["TRYAGAIN"]))
		}
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ") + " (MOVED/ASK/TRYAGAIN)"
}
