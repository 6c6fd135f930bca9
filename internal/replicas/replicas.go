// Package replicas makes a write that Redis acknowledged survive the death of
// the primary that took it. Redis replicates asynchronously: a primary
// answers a write before its replicas have it, so a failover can promote a
// replica that misses the last writes — for a feed, a post that its outbox
// row says was delivered, lost for good. WAIT (redis.io/commands/wait) blocks
// until a number of replicas acknowledged every write made on the same
// connection, and a Redis Cluster promotes the replica with the most data: a
// write that WAIT saw on the only replica of its primary is on whichever
// node takes over.
//
// WAIT counts the writes of its own connection, and a client's pool gives
// no say over which one serves a command; so Wait writes a small marker key
// on each primary that was written to and sends WAIT on that marker's
// connection. The replication stream is in order: once a replica has the
// marker, it has every write the primary applied before it.
package replicas

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// markerTTL is how long a marker key lives: long enough to be written,
// replicated and waited for, short enough that markers cost nothing.
const markerTTL = time.Minute

// Waiter waits for replicas after writes. A nil Waiter, or one for zero
// replicas, waits for nothing.
type Waiter struct {
	rdb      redis.UniversalClient
	prefix   string
	replicas int
	timeout  time.Duration
}

// New returns a Waiter that, after writes, waits up to timeout for replicas
// replicas of every primary written to. Marker keys are put under prefix.
// It returns nil when replicas is 0.
func New(rdb redis.UniversalClient, prefix string, replicas int, timeout time.Duration) *Waiter {
	if replicas <= 0 {
		return nil
	}
	return &Waiter{rdb: rdb, prefix: prefix, replicas: replicas, timeout: timeout}
}

// ShortError says that fewer replicas than asked acknowledged the writes in
// time: they are on the primary, and would be lost with it.
type ShortError struct {
	Node    string // the primary
	Acked   int64  // replicas that had the writes in time
	Want    int    // replicas waited for: redis.wait_replicas, or fewer if the primary lists fewer
	Listed  int    // replicas the primary listed
	Timeout time.Duration
}

func (e *ShortError) Error() string {
	return fmt.Sprintf("redis %s: %d of %d replicas acknowledged the writes within %s (redis.wait_replicas; it lists %d)",
		e.Node, e.Acked, e.Want, e.Timeout, e.Listed)
}

// Wait returns once every write already applied to the primaries that hold
// keys reached the replicas, or an error: a *ShortError when too few
// replicas answered in time, or the error Redis gave. The caller treats an
// error as a failed write and tries again later (its writes are idempotent).
func (w *Waiter) Wait(ctx context.Context, keys ...string) error {
	if w == nil || len(keys) == 0 {
		return nil
	}
	cc, ok := w.rdb.(*redis.ClusterClient)
	if !ok {
		one, ok := w.rdb.(*redis.Client)
		if !ok {
			return fmt.Errorf("redis.wait_replicas: unsupported Redis client %T", w.rdb)
		}
		return w.waitOn(ctx, one, hashTag(keys[0]))
	}
	// A marker in the slot of any key of a primary lands on it. A few per
	// primary: while slots move (a reshard), a slot's marker may be sent
	// on (MOVED, ASK), and the next one is tried.
	nodes := make(map[string]*redis.Client)
	tags := make(map[string][]string)
	for _, k := range keys {
		node, err := cc.MasterForKey(ctx, k)
		if err != nil {
			return fmt.Errorf("find the primary of %s: %w", k, err)
		}
		addr := node.Options().Addr
		nodes[addr] = node
		if tag := hashTag(k); len(tags[addr]) < markerTries && !slices.Contains(tags[addr], tag) {
			tags[addr] = append(tags[addr], tag)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for addr, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- w.waitOn(ctx, node, tags[addr]...)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// markerTries is how many slots of a primary a marker is tried in.
const markerTries = 4

// waitOn writes the marker of tag on one connection of c, asks the primary
// how many replicas it has, and waits for that many (at most w.replicas)
// on the same connection.
//
// A primary that lists no replica has none to fail over to: should it die,
// its slots are down until it comes back, empty — what it held is lost as
// a whole, and the feeds it held are rebuilt from PostgreSQL on their next
// read (a feed that is missing is never mistaken for a complete one). So
// its writes do not wait: a shard whose replica took over from it goes on
// taking fan-out at once, instead of stalling until a replica is back.
// A replica that is listed but syncing, or stopped, must answer in time.
func (w *Waiter) waitOn(ctx context.Context, c *redis.Client, tags ...string) error {
	node := c.Options().Addr
	conn := c.Conn()
	defer conn.Close()
	var info *redis.StringCmd
	var err error
	for _, tag := range tags {
		var set *redis.StatusCmd
		_, err = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			set = p.Set(ctx, w.prefix+"replicated:{"+tag+"}", 1, markerTTL)
			info = p.Info(ctx, "replication")
			return nil
		})
		if err = set.Err(); err == nil || !isRedirect(err) {
			break
		}
	}
	if err != nil {
		// Still MOVED: the slots of the writes left this primary; the
		// caller's retry waits where they are now.
		return fmt.Errorf("redis %s: write the replication marker: %w", node, err)
	}
	if err := info.Err(); err != nil {
		return fmt.Errorf("redis %s: read its replicas: %w", node, err)
	}
	listed := listedReplicas(info.Val())
	want := min(w.replicas, listed)
	if want == 0 {
		return nil
	}
	acked, err := conn.Wait(ctx, want, w.timeout).Result()
	if err != nil {
		return fmt.Errorf("redis %s: wait for replicas: %w", node, err)
	}
	if acked < int64(want) {
		return &ShortError{Node: node, Acked: acked, Want: want, Listed: listed, Timeout: w.timeout}
	}
	return nil
}

func isRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// listedReplicas counts the replicas in a primary's INFO replication, in
// any state (online, or syncing: slave0:ip=…,port=…,state=online,…).
func listedReplicas(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(name, "slave") {
			if _, err := strconv.Atoi(strings.TrimPrefix(name, "slave")); err == nil {
				n++
			}
		}
	}
	return n
}

// hashTag is what a cluster hashes of key: the part between the first "{"
// and the next "}", when not empty; else the whole key.
func hashTag(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			return key[open+1 : open+1+n]
		}
	}
	return key
}
