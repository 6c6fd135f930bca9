// Package queue is the queue between dispatchers and fan-out workers: Redis
// streams read through a consumer group, so that several workers share the
// tickets and a crashed worker's tickets are taken over by the others.
//
// The queue is split into partitions, one stream each (partitions.go), so
// that on a Redis Cluster the tickets spread over the shards: a ticket goes
// to the partition its event id hashes to, its id names the partition, and
// every worker reads every partition (read.go). With one partition, the
// default, the queue is the one stream it always was.
//
// A ticket is acknowledged and deleted in one step once its fan-out finished,
// so a stream only ever holds tickets that are waiting or in progress:
// nothing unacknowledged is ever trimmed, and nothing acknowledged piles up.
package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/defaults"
	"github.com/newsfeed/newsfeed/internal/replicas"
)

// MaxPartitions bounds Config.Partitions.
const MaxPartitions = 1024

// The defaults of Config: a zero field takes its default.
const (
	// DefaultPartitions is the streams new tickets are spread over
	// (queue.partitions).
	DefaultPartitions = 1
	// DefaultRefresh is how often a queue reads the registry of partitions again.
	DefaultRefresh = 2 * time.Second
	// DefaultWaitTimeout bounds the wait for replicas (redis.wait_timeout).
	DefaultWaitTimeout = replicas.DefaultTimeout
)

// The names newsfeed gives its queue, which Config has no default for:
// app's configuration defaults (queue.stream, put after redis.prefix, and
// queue.group) are these.
const (
	// DefaultStream is partition 0's key after the prefix: "nf:tickets".
	DefaultStream = "tickets"
	// DefaultGroup is the consumer group of the fan-out workers.
	DefaultGroup = "fanout"
)

// Config configures a Queue.
type Config struct {
	// Stream is the key of partition 0 (the prefix included: "nf:tickets");
	// the other partitions' keys are built from it (Key). It must not hold a
	// hash tag ("{…}") when Partitions > 1: the partitions' own tags spread
	// them over a cluster's slots.
	Stream string
	// Group is the consumer group of the workers.
	Group string
	// Partitions is how many streams new tickets are spread over, 1 to
	// MaxPartitions; 0 means DefaultPartitions (1). Every queue also reads the partitions beyond
	// its own count that other processes registered (a count changed on a
	// running system), until they are empty.
	Partitions int
	// Refresh is how often the registry of partitions is read again, which
	// bounds how soon a reader sees a partition another process registered.
	// Defaults to DefaultRefresh (2s).
	Refresh time.Duration
	// WaitReplicas is how many replicas of a partition's primary must have
	// a ticket before Publish reports it written (redis.wait_replicas), so
	// that a failover cannot lose a ticket whose outbox row is marked
	// published. 0 (the default) waits for none; negative is out of range.
	WaitReplicas int
	// WaitTimeout bounds that wait (redis.wait_timeout); a ticket whose
	// replicas did not answer in time is reported failed, and published
	// again. Defaults to DefaultWaitTimeout (1s); negative is out of range.
	WaitTimeout time.Duration
}

// Queue is a set of Redis streams, the partitions, with one consumer group.
type Queue struct {
	rdb        redis.UniversalClient
	stream     string
	group      string
	partitions int
	refresh    time.Duration
	replicas   *replicas.Waiter // nil: no wait

	// turn rotates where a read or a claim starts among the partitions.
	turn atomic.Uint64

	mu        sync.Mutex
	known     []int // the configured partitions and the registered ones, ascending
	knownAt   time.Time
	retiredAt time.Time
}

// New returns a queue of one partition on stream (a full key) read by group.
func New(rdb redis.UniversalClient, stream, group string) *Queue {
	q, err := NewPartitioned(rdb, Config{Stream: stream, Group: group, Partitions: 1})
	if err != nil {
		panic(err) // one partition is always valid
	}
	return q
}

// NewPartitioned returns a queue configured by cfg. It returns an error when
// a value of cfg is out of range.
func NewPartitioned(rdb redis.UniversalClient, cfg Config) (*Queue, error) {
	defaults.Fill(&cfg.Partitions, DefaultPartitions)
	defaults.Fill(&cfg.Refresh, DefaultRefresh)
	defaults.Fill(&cfg.WaitTimeout, DefaultWaitTimeout)
	switch {
	case cfg.Partitions < 1 || cfg.Partitions > MaxPartitions:
		return nil, fmt.Errorf("queue: Config.Partitions is %d, out of range: it must be 1 to %d", cfg.Partitions, MaxPartitions)
	case cfg.Partitions > 1 && strings.Contains(cfg.Stream, "{"):
		return nil, fmt.Errorf("queue: Config.Stream %q holds a hash tag: every partition would be in its slot", cfg.Stream)
	}
	if err := errors.Join(
		defaults.NotNegative("queue.Config", "Refresh", cfg.Refresh, defaults.The(DefaultRefresh)),
		defaults.NotNegative("queue.Config", "WaitReplicas", cfg.WaitReplicas, "no wait"),
		defaults.NotNegative("queue.Config", "WaitTimeout", cfg.WaitTimeout, defaults.The(DefaultWaitTimeout)),
	); err != nil {
		return nil, err
	}
	q := &Queue{rdb: rdb, stream: cfg.Stream, group: cfg.Group, partitions: cfg.Partitions, refresh: cfg.Refresh,
		replicas: replicas.New(rdb, cfg.Stream+":", cfg.WaitReplicas, cfg.WaitTimeout)}
	q.known = q.configured()
	return q, nil
}

// Stream returns the key of partition 0, the queue's one stream when it has
// a single partition.
func (q *Queue) Stream() string { return q.stream }

// Partitions returns how many partitions new tickets are spread over.
func (q *Queue) Partitions() int { return q.partitions }

// EnsureGroup creates the configured partitions' streams and their group
// where they do not exist. The group starts at the beginning, so a group
// created after the stream (Redis lost both and the dispatcher wrote first)
// still sees every ticket in it.
func (q *Queue) EnsureGroup(ctx context.Context) error {
	cmds := make([]*redis.StatusCmd, q.partitions)
	_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for part := range q.partitions {
			cmds[part] = p.XGroupCreateMkStream(ctx, q.Key(part), q.group, "0")
		}
		return nil
	})
	var errs []error
	for part, cmd := range cmds {
		if err := cmd.Err(); err != nil && !isBusyGroup(err) {
			errs = append(errs, fmt.Errorf("create consumer group of %s: %w", q.Key(part), err))
		}
	}
	return errors.Join(errs...)
}

// ensureGroup creates one partition's group; the stream too if it is one of
// the configured partitions. A partition beyond them is only read while it
// exists: creating it would leave an empty stream that nothing retires.
func (q *Queue) ensureGroup(ctx context.Context, part int) error {
	var err error
	if part < q.partitions {
		err = q.rdb.XGroupCreateMkStream(ctx, q.Key(part), q.group, "0").Err()
	} else {
		err = q.rdb.XGroupCreate(ctx, q.Key(part), q.group, "0").Err()
	}
	if err != nil && !isBusyGroup(err) {
		return fmt.Errorf("create consumer group of %s: %w", q.Key(part), err)
	}
	return nil
}

// Publish appends one ticket per event, each to the partition of its event
// id, and returns, per event, the ticket's id or the error Redis gave. After
// the tickets it registers their partitions and rings the bell that wakes
// waiting readers: in the same pipeline on a single Redis, which runs it in
// order; in a second round trip on a cluster, whose nodes run their parts of
// a pipeline side by side.
func (q *Queue) Publish(ctx context.Context, events []domain.Event) ([]string, []error) {
	parts := make([]int, len(events))
	for i, e := range events {
		parts[i] = q.Partition(e.ID)
	}
	ids, errs := q.publish(ctx, events, parts)
	if q.replicas == nil {
		return ids, errs
	}
	// A ticket whose partition's primary could not have it replicated (its
	// shard has had no replica since a failover, say) goes to a partition
	// on another shard: every worker reads every partition, and a ticket's
	// id names the one it is in. The first copy may still be read: a
	// duplicate ticket is harmless, a lost one costs outbox.redeliver_after.
	var again []int
	down := map[string]bool{}
	for i, err := range errs {
		var re *replicas.Error
		if errors.As(err, &re) && re.Node != "" {
			again = append(again, i)
			down[re.Node] = true
		}
	}
	if len(again) == 0 {
		return ids, errs
	}
	away := q.partitionsAwayFrom(ctx, down)
	if len(away) == 0 {
		return ids, errs
	}
	moved := make([]domain.Event, len(again))
	movedParts := make([]int, len(again))
	for j, i := range again {
		moved[j], movedParts[j] = events[i], away[j%len(away)]
	}
	movedIDs, movedErrs := q.publish(ctx, moved, movedParts)
	for j, i := range again {
		ids[i], errs[i] = movedIDs[j], movedErrs[j]
	}
	return ids, errs
}

// partitionsAwayFrom returns the configured partitions whose primary is not
// one of down (addresses), on a Redis Cluster.
func (q *Queue) partitionsAwayFrom(ctx context.Context, down map[string]bool) []int {
	cc, ok := q.rdb.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	var away []int
	for _, part := range q.configured() {
		if node, err := cc.MasterForKey(ctx, q.Key(part)); err == nil && !down[node.Options().Addr] {
			away = append(away, part)
		}
	}
	return away
}

// publish is Publish with the partition of each event given.
func (q *Queue) publish(ctx context.Context, events []domain.Event, parts []int) ([]string, []error) {
	ids := make([]string, len(events))
	errs := make([]error, len(events))
	cmds := make([]*redis.StringCmd, len(events))
	_, cluster := q.rdb.(*redis.ClusterClient)
	var touched []string
	if q.replicas != nil {
		for _, part := range parts {
			if k := q.Key(part); !slices.Contains(touched, k) {
				touched = append(touched, k)
			}
		}
	}
	since := q.replicas.Begin(ctx, touched...)
	var registered *redis.IntCmd
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range events {
			cmds[i] = p.XAdd(ctx, &redis.XAddArgs{Stream: q.Key(parts[i]), Values: encode(e)})
		}
		if !cluster {
			registered = q.register(ctx, p, parts)
		}
		return nil
	})
	var written []int
	for i, cmd := range cmds {
		switch {
		case cmd == nil:
			errs[i] = err
		case cmd.Err() != nil:
			errs[i] = cmd.Err()
		default:
			ids[i] = ticketID(parts[i], cmd.Val())
			written = append(written, parts[i])
		}
	}
	if len(written) == 0 {
		return ids, errs
	}
	if cluster {
		_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			registered = q.register(ctx, p, written)
			return nil
		})
	}
	// A ticket of a partition that no reader knows would wait unread: a
	// failed registration fails the ticket, which the dispatcher publishes
	// again (a duplicate is harmless, a lost ticket is not).
	if registered != nil && registered.Err() != nil {
		rerr := fmt.Errorf("register the partitions of %s: %w", q.stream, registered.Err())
		for i := range events {
			if errs[i] == nil && parts[i] != 0 {
				ids[i], errs[i] = "", rerr
			}
		}
	}
	// The same for a ticket that a failover could still lose: one whose
	// partition's primary has not had it replicated. (Not the registry's: a
	// registration a failover lost is restored by Holds, and the configured
	// partitions are read without one.)
	if failed := q.replicas.WaitEach(ctx, since); len(failed) > 0 {
		for i := range events {
			if errs[i] != nil {
				continue
			}
			if werr := q.replicas.Failed(failed, since, q.Key(parts[i])); werr != nil {
				ids[i], errs[i] = "", werr
			}
		}
	}
	return ids, errs
}

// Holds reports, per ticket id, whether its partition still holds the
// ticket: waiting for a worker or in progress (acknowledged tickets are
// deleted). A ticket id this queue did not make is not held. The partitions
// of the held tickets are registered again, so that a registration Redis
// lost (a failover) is restored before the ticket is counted on.
func (q *Queue) Holds(ctx context.Context, ticketIDs []string) ([]bool, error) {
	parts := make([]int, len(ticketIDs))
	cmds := make([]*redis.XMessageSliceCmd, len(ticketIDs))
	_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ticketIDs {
			part, entry, err := ParseTicket(id)
			if err != nil {
				continue
			}
			parts[i] = part
			cmds[i] = p.XRangeN(ctx, q.Key(part), entry, entry, 1)
		}
		return nil
	})
	held := make([]bool, len(ticketIDs))
	var heldParts []int
	for i, c := range cmds {
		if c == nil {
			continue
		}
		if err := c.Err(); err != nil && !isNil(err) {
			return nil, fmt.Errorf("look up tickets: %w", err)
		}
		held[i] = len(c.Val()) > 0
		if held[i] {
			heldParts = append(heldParts, parts[i])
		}
	}
	if err := q.reregister(ctx, heldParts); err != nil {
		return nil, err
	}
	return held, nil
}

// Touch tells the group that consumer still works on the ticket, so that no
// other consumer claims it as stale.
func (q *Queue) Touch(ctx context.Context, consumer, ticket string) error {
	part, entry, err := ParseTicket(ticket)
	if err != nil {
		return fmt.Errorf("touch ticket: %w", err)
	}
	err = q.rdb.XClaimJustID(ctx, &redis.XClaimArgs{
		Stream: q.Key(part), Group: q.group, Consumer: consumer, Messages: []string{entry},
	}).Err()
	if err != nil {
		return fmt.Errorf("touch ticket %s: %w", ticket, err)
	}
	return nil
}

// Ack acknowledges the ticket and deletes it from its partition, atomically.
func (q *Queue) Ack(ctx context.Context, ticket string) error {
	part, entry, err := ParseTicket(ticket)
	if err != nil {
		return fmt.Errorf("ack ticket: %w", err)
	}
	_, err = q.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, q.Key(part), q.group, entry)
		p.XDel(ctx, q.Key(part), entry)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ack ticket %s: %w", ticket, err)
	}
	return nil
}

// DeadLetter copies the ticket with its cause to its partition's dead-letter
// stream (DeadKey; for operators to look at, the outbox row is the record)
// and acknowledges it. Partition p > 0 and its dead letters share a hash
// tag, so the copy and the acknowledgement are one MULTI even on a cluster;
// partition 0 keeps the keys it always had, in two slots, and copies first.
func (q *Queue) DeadLetter(ctx context.Context, t domain.Delivery, cause string) error {
	part, entry, err := ParseTicket(t.MessageID)
	if err != nil {
		return fmt.Errorf("dead-letter ticket: %w", err)
	}
	values := encode(t.Event)
	values = append(values, "cause", cause, "deliveries", t.Deliveries)
	dead := &redis.XAddArgs{Stream: q.DeadKey(part), Values: values, MaxLen: 10000, Approx: true}
	if part == 0 {
		if err := q.rdb.XAdd(ctx, dead).Err(); err != nil {
			return fmt.Errorf("dead-letter ticket %s: %w", t.MessageID, err)
		}
		return q.Ack(ctx, t.MessageID)
	}
	_, err = q.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, dead)
		p.XAck(ctx, q.Key(part), q.group, entry)
		p.XDel(ctx, q.Key(part), entry)
		return nil
	})
	if err != nil {
		return fmt.Errorf("dead-letter ticket %s: %w", t.MessageID, err)
	}
	return nil
}

// Pending returns how many tickets were delivered to workers and not yet
// acknowledged, over every partition.
func (q *Queue) Pending(ctx context.Context) (int64, error) {
	parts, err := q.knownPartitions(ctx)
	if err != nil {
		return 0, err
	}
	cmds := make([]*redis.XPendingCmd, len(parts))
	_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, part := range parts {
			cmds[i] = p.XPending(ctx, q.Key(part), q.group)
		}
		return nil
	})
	var n int64
	for _, c := range cmds {
		err := c.Err()
		if isNoGroup(err) || isNil(err) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("count pending tickets: %w", err)
		}
		n += c.Val().Count
	}
	return n, nil
}

// encode is a ticket's fields. "trace", the W3C traceparent that the
// worker's fan-out continues, is there only when the event has one.
func encode(e domain.Event) []any {
	fields := []any{
		"id", e.ID,
		"type", e.Type,
		"attempt", e.Attempt,
		"failures", e.Failures,
		"created", e.CreatedAt.UnixMicro(),
		"payload", string(e.Payload),
	}
	if e.TraceContext != "" {
		fields = append(fields, "trace", e.TraceContext)
	}
	return fields
}

// decode never fails: a malformed ticket decodes to an event with zero
// fields, which the worker rejects and parks as dead.
func decode(part int, m redis.XMessage, deliveries int64) domain.Delivery {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	num := func(k string) int64 { n, _ := strconv.ParseInt(str(k), 10, 64); return n }
	return domain.Delivery{
		MessageID:  ticketID(part, m.ID),
		Deliveries: deliveries,
		Event: domain.Event{
			ID:        num("id"),
			Type:      str("type"),
			Attempt:   int(num("attempt")),
			Failures:  int(num("failures")),
			CreatedAt: time.UnixMicro(num("created")),
			Payload:   []byte(str("payload")),

			TraceContext: str("trace"),
		},
	}
}
