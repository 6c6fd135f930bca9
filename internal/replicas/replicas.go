// Package replicas makes a write that Redis acknowledged survive the death of
// the primary that took it. Redis replicates asynchronously: a primary
// answers a write before its replicas have it, so a failover can promote a
// replica that misses the last writes — for a feed, a post that its outbox
// row says was delivered, lost for good. WAIT (redis.io/commands/wait) blocks
// until a number of replicas acknowledged every write made on the same
// connection; a Redis Cluster promotes a replica of the failed primary, so
// with one replica per primary a write that WAIT saw there is on whichever
// node takes over.
//
// A writer calls Begin with the keys it will write, before its writes, and
// Wait after them:
//
//   - WAIT counts the writes of its own connection, and a client's pool gives
//     no say over which one serves a command; so Wait takes one connection of
//     each primary that owns a written key, writes a small marker key there,
//     in the slot of one of those keys, and sends WAIT after it in the same
//     pipeline. The replication stream is in order: once a replica has the
//     marker, it has every write the primary applied before it.
//   - Begin notes, by the client's slot map (the one the writes will use),
//     which primary owns each key; Wait fails if the owners changed: a write
//     acknowledged by a primary that a failover has since replaced may be
//     missing on its successor, which WAIT on the successor would not tell.
//   - It waits for the number of replicas asked, whatever a primary has: a
//     primary without a replica (its replica was just promoted, or is gone)
//     holds back the writes to its own keys until one is there again.
//     Counting only the replicas a primary sees now would lose writes to a
//     replica cut off for a moment, which a failover may still promote. The
//     other primaries' writes go on: an error names the keys of its node.
//
// Every failure is an *Error, which is domain.ErrUnavailable: the caller
// tries its (idempotent) writes again later, without counting it against the
// event.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
)

// markerTTL is how long a marker key lives: long enough to be written,
// replicated and waited for, short enough that markers cost nothing.
const markerTTL = time.Minute

// DefaultTimeout is the wait for replicas of the writers that take one
// (feed.Config.WaitTimeout, queue.Config.WaitTimeout: redis.wait_timeout).
const DefaultTimeout = time.Second

// Waiter waits for replicas after writes. A nil Waiter waits for nothing.
type Waiter struct {
	rdb      redis.UniversalClient
	prefix   string
	replicas int
	timeout  time.Duration
}

// New returns a Waiter that, after writes, waits up to timeout for replicas
// replicas of every primary written to. Marker keys are put under prefix. It returns
// nil, which waits for nothing, when replicas is 0. rdb must be one Redis
// (*redis.Client) or a Redis Cluster (*redis.ClusterClient): with another
// client every Wait fails.
func New(rdb redis.UniversalClient, prefix string, replicas int, timeout time.Duration) *Waiter {
	if replicas <= 0 {
		return nil
	}
	return &Waiter{rdb: rdb, prefix: prefix, replicas: replicas, timeout: timeout}
}

// Error says that writes may not be on enough replicas yet.
type Error struct {
	Node   string // the primary, or "" when the topology changed
	Acked  int64  // replicas that had the writes in time
	Want   int
	Reason string // why, when not too few acknowledgements
	Err    error  // what Redis answered, if it did
}

func (e *Error) Error() string {
	switch {
	case e.Reason != "" && e.Node != "":
		return fmt.Sprintf("redis %s: %s (redis.wait_replicas)", e.Node, e.Reason)
	case e.Reason != "":
		return e.Reason + " (redis.wait_replicas)"
	default:
		return fmt.Sprintf("redis %s: %d of %d replicas acknowledged the writes in time (redis.wait_replicas)", e.Node, e.Acked, e.Want)
	}
}

func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{domain.ErrUnavailable, e.Err}
	}
	return []error{domain.ErrUnavailable}
}

// Topology is, per primary, the written keys it owns, as Begin saw them.
type Topology struct{ nodes map[string][]string }

// Begin returns which primary owns each of keys now, for Wait to compare
// with. On one Redis it notes nothing.
func (w *Waiter) Begin(ctx context.Context, keys ...string) Topology {
	if w == nil {
		return Topology{}
	}
	cc, ok := w.rdb.(*redis.ClusterClient)
	if !ok {
		return Topology{}
	}
	nodes := map[string][]string{}
	for _, k := range keys {
		node, err := cc.MasterForKey(ctx, k)
		if err != nil {
			continue // met again in Wait, which looks the key up too
		}
		addr := node.Options().Addr
		nodes[addr] = append(nodes[addr], k)
	}
	return Topology{nodes: nodes}
}

// Wait returns once every write applied before it to the keys given to
// Begin is on the replicas of their primaries; else an *Error (several
// joined when several primaries failed).
func (w *Waiter) Wait(ctx context.Context, since Topology) error {
	var all []error
	for _, err := range w.WaitEach(ctx, since) {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// WaitEach is Wait, with the error of each primary that failed, by address.
func (w *Waiter) WaitEach(ctx context.Context, since Topology) map[string]error {
	if w == nil {
		return nil
	}
	cc, ok := w.rdb.(*redis.ClusterClient)
	if !ok {
		one, ok := w.rdb.(*redis.Client)
		if !ok {
			return map[string]error{"": &Error{Reason: fmt.Sprintf("cannot wait for the replicas of a %T", w.rdb)}}
		}
		if err := w.waitOn(ctx, one, []string{"replicated"}); err != nil {
			return map[string]error{one.Options().Addr: err}
		}
		return nil
	}
	var mu sync.Mutex
	errs := map[string]error{}
	var wg sync.WaitGroup
	for addr, keys := range since.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.waitFor(ctx, cc, addr, keys)
			if err != nil {
				mu.Lock()
				errs[addr] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// Failed returns the error, after WaitEach gave errs, of the primary that
// Begin saw owning key; nil when its writes are on the replicas.
func (w *Waiter) Failed(errs map[string]error, since Topology, key string) error {
	if len(errs) == 0 {
		return nil
	}
	for addr, keys := range since.nodes {
		if slices.Contains(keys, key) {
			return errs[addr]
		}
	}
	for _, err := range errs { // one Redis
		return err
	}
	return nil
}

// waitFor waits for the replicas of the primary addr, which owned keys when
// Begin looked; it fails if one of them has another owner now.
func (w *Waiter) waitFor(ctx context.Context, cc *redis.ClusterClient, addr string, keys []string) error {
	var node *redis.Client
	for _, k := range keys {
		n, err := cc.MasterForKey(ctx, k)
		if err != nil {
			return &Error{Node: addr, Reason: "find the primary of " + k, Err: err}
		}
		if a := n.Options().Addr; a != addr {
			return &Error{Node: addr, Reason: fmt.Sprintf(
				"%s moved to %s during the writes: what %s took may be missing there", k, a, addr)}
		}
		node = n
	}
	tags := make([]string, 0, markerTries)
	for _, k := range keys {
		if t := hashTag(k); !slices.Contains(tags, t) {
			tags = append(tags, t)
			if len(tags) == markerTries {
				break
			}
		}
	}
	return w.waitOn(ctx, node, tags)
}

// waitOn writes a marker on one connection of c, in the slot of the first
// of tags, and waits there for the replicas, in one round trip. A marker
// sent on by a moving slot (MOVED, ASK) is tried in the next.
func (w *Waiter) waitOn(ctx context.Context, c *redis.Client, tags []string) error {
	node := c.Options().Addr
	conn := c.Conn()
	defer conn.Close()
	var set *redis.StatusCmd
	var wait *redis.IntCmd
	var err error
	for _, t := range tags {
		_, _ = conn.Pipelined(ctx, func(p redis.Pipeliner) error { // each command's error is read below
			set = p.Set(ctx, w.prefix+"replicated:{"+t+"}", 1, markerTTL)
			wait = waitCmd(ctx, p, w.replicas, w.timeout)
			return nil
		})
		if err = set.Err(); err == nil || !isRedirect(err) {
			break
		}
	}
	if err != nil {
		return &Error{Node: node, Reason: "write the replication marker", Err: err}
	}
	acked, err := wait.Result()
	if err != nil {
		return &Error{Node: node, Reason: "wait for replicas", Err: err}
	}
	if acked < int64(w.replicas) {
		return &Error{Node: node, Acked: acked, Want: w.replicas}
	}
	return nil
}

// waitCmd queues WAIT on p. (A Pipeliner has no Wait method; the client
// gives a pipeline its read timeout, 3 s, which WAIT's timeout stays under:
// app bounds redis.wait_timeout.)
func waitCmd(ctx context.Context, p redis.Pipeliner, replicas int, timeout time.Duration) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "wait", replicas, timeout.Milliseconds())
	_ = p.Process(ctx, cmd)
	return cmd
}

// markerTries is how many slots a marker is tried in.
const markerTries = 4

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

func isRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}
