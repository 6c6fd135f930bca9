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
// A writer calls Begin before its writes and Wait after them:
//
//   - WAIT counts the writes of its own connection, and a client's pool gives
//     no say over which one serves a command; so Wait takes one connection of
//     a primary, writes a small marker key there and sends WAIT on it. The
//     replication stream is in order: once a replica has the marker, it has
//     every write the primary applied before it.
//   - It does so on every primary of the cluster, not only on those that own
//     the keys written: a write that a moving slot sent elsewhere (ASK, MOVED)
//     is on some primary all the same.
//   - It fails if the primaries are not those Begin saw: a write acknowledged
//     by a primary that a failover has since replaced may be missing on its
//     successor, which WAIT on the successor would not tell.
//   - It waits for the number of replicas asked, whatever a primary has: a
//     primary without a replica (its replica was just promoted, or is gone)
//     holds its writes back until one is there again. Counting only the
//     replicas a primary sees now would lose writes to a replica cut off for
//     a moment, which a failover may still promote.
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
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
)

// markerTTL is how long a marker key lives: long enough to be written,
// replicated and waited for, short enough that markers cost nothing.
const markerTTL = time.Minute

// Waiter waits for replicas after writes. A nil Waiter waits for nothing.
type Waiter struct {
	rdb      redis.UniversalClient
	prefix   string
	replicas int
	timeout  time.Duration

	mu   sync.Mutex
	tags map[string]int // primary address → a hash tag ("{n}") of a slot it owns
	from map[string]int // primary address → where the search for its next tag starts
}

// New returns a Waiter that, after writes, waits up to timeout for replicas
// replicas of every primary. Marker keys are put under prefix. It returns
// nil, which waits for nothing, when replicas is 0. rdb must be one Redis
// (*redis.Client) or a Redis Cluster (*redis.ClusterClient): with another
// client every Wait fails.
func New(rdb redis.UniversalClient, prefix string, replicas int, timeout time.Duration) *Waiter {
	if replicas <= 0 {
		return nil
	}
	return &Waiter{rdb: rdb, prefix: prefix, replicas: replicas, timeout: timeout, tags: map[string]int{}, from: map[string]int{}}
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

// Topology is the primaries a writer's writes may go to, as Begin saw them.
type Topology struct{ primaries []string }

// Begin returns the primaries now, for Wait to compare with.
func (w *Waiter) Begin(ctx context.Context) Topology {
	if w == nil {
		return Topology{}
	}
	cc, ok := w.rdb.(*redis.ClusterClient)
	if !ok {
		return Topology{}
	}
	primaries, _ := w.primaries(ctx, cc) // an error here is met again in Wait
	return Topology{primaries: primaries}
}

// Wait returns once every write applied before it, since Begin returned
// since, is on the replicas of every primary; else an *Error.
func (w *Waiter) Wait(ctx context.Context, since Topology) error {
	errs := w.WaitEach(ctx, since)
	var all []error
	for _, err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// WaitEach is Wait, with the error of each primary that failed, by address
// ("" when the topology changed, which fails every write).
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
		if err := w.waitOn(ctx, one, func() (string, error) { return "replicated", nil }); err != nil {
			return map[string]error{one.Options().Addr: err}
		}
		return nil
	}
	var mu sync.Mutex
	errs := map[string]error{}
	var now []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		addr := node.Options().Addr
		err := w.waitOn(ctx, node, func() (string, error) { return w.tagOf(ctx, cc, addr) })
		mu.Lock()
		defer mu.Unlock()
		now = append(now, addr)
		if err != nil {
			errs[addr] = err
		}
		return nil
	})
	if err != nil {
		return map[string]error{"": &Error{Reason: "list the primaries", Err: err}}
	}
	slices.Sort(now)
	if !slices.Equal(now, since.primaries) {
		return map[string]error{"": &Error{Reason: fmt.Sprintf(
			"the primaries changed during the writes (%v, now %v): what the old ones took may be missing", since.primaries, now)}}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// Failed reports whether the writes to key are in doubt after WaitEach gave
// errs: its primary failed, or the topology changed.
func (w *Waiter) Failed(ctx context.Context, errs map[string]error, key string) error {
	if len(errs) == 0 {
		return nil
	}
	if err, ok := errs[""]; ok {
		return err
	}
	cc, ok := w.rdb.(*redis.ClusterClient)
	if !ok {
		for _, err := range errs {
			return err
		}
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return &Error{Reason: "find the primary of " + key, Err: err}
	}
	return errs[node.Options().Addr]
}

func (w *Waiter) primaries(ctx context.Context, cc *redis.ClusterClient) ([]string, error) {
	var mu sync.Mutex
	var addrs []string
	err := cc.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		addrs = append(addrs, node.Options().Addr)
		return nil
	})
	slices.Sort(addrs)
	return addrs, err
}

// waitOn writes a marker on one connection of c, in the slot of the tag
// that tag gives, and waits there for the replicas. A marker sent on by a
// moving slot (MOVED, ASK) is tried in another slot.
func (w *Waiter) waitOn(ctx context.Context, c *redis.Client, tag func() (string, error)) error {
	node := c.Options().Addr
	conn := c.Conn()
	defer conn.Close()
	var err error
	for range markerTries {
		var t string
		if t, err = tag(); err != nil {
			return &Error{Node: node, Reason: "find a slot of its own", Err: err}
		}
		key := w.prefix + "replicated:{" + t + "}"
		if err = conn.Set(ctx, key, 1, markerTTL).Err(); err == nil || !isRedirect(err) {
			break
		}
		w.forget(node)
	}
	if err != nil {
		return &Error{Node: node, Reason: "write the replication marker", Err: err}
	}
	acked, err := conn.Wait(ctx, w.replicas, w.timeout).Result()
	if err != nil {
		return &Error{Node: node, Reason: "wait for replicas", Err: err}
	}
	if acked < int64(w.replicas) {
		return &Error{Node: node, Acked: acked, Want: w.replicas}
	}
	return nil
}

// markerTries is how many slots a marker is tried in.
const markerTries = 4

// tagOf returns a hash tag whose slot addr owns, by the client's slot map:
// found once by trying "0", "1", … (a slot map is local, a lookup cheap),
// then kept until a marker there is redirected; the search for the next
// one starts after it.
func (w *Waiter) tagOf(ctx context.Context, cc *redis.ClusterClient, addr string) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n, ok := w.tags[addr]; ok {
		return strconv.Itoa(n), nil
	}
	for n := w.from[addr]; n < w.from[addr]+1<<16; n++ {
		node, err := cc.MasterForKey(ctx, "{"+strconv.Itoa(n)+"}")
		if err != nil {
			return "", err
		}
		if node.Options().Addr == addr {
			w.tags[addr] = n
			return strconv.Itoa(n), nil
		}
	}
	return "", fmt.Errorf("no slot of %s in the slot map", addr)
}

// forget drops addr's tag after a marker there was redirected.
func (w *Waiter) forget(addr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n, ok := w.tags[addr]; ok {
		w.from[addr] = n + 1
		delete(w.tags, addr)
	}
}

func isRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}
