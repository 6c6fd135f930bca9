// Package queue is the queue between dispatchers and fan-out workers: a Redis
// stream read through a consumer group, so that several workers share the
// tickets and a crashed worker's tickets are taken over by the others.
//
// A ticket is acknowledged and deleted in one step once its fan-out finished,
// so the stream only ever holds tickets that are waiting or in progress:
// nothing unacknowledged is ever trimmed, and nothing acknowledged piles up.
package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
)

// Queue is a Redis stream with one consumer group.
type Queue struct {
	rdb    redis.UniversalClient
	stream string
	dead   string
	group  string
}

// New returns a queue on stream (a full key) read by group.
func New(rdb redis.UniversalClient, stream, group string) *Queue {
	return &Queue{rdb: rdb, stream: stream, dead: stream + ":dead", group: group}
}

// Stream returns the stream key.
func (q *Queue) Stream() string { return q.stream }

// EnsureGroup creates the stream and its group if they do not exist. The group
// starts at the beginning, so a group created after the stream (Redis lost
// both and the dispatcher wrote first) still sees every ticket in it.
func (q *Queue) EnsureGroup(ctx context.Context) error {
	err := q.rdb.XGroupCreateMkStream(ctx, q.stream, q.group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create consumer group: %w", err)
	}
	return nil
}

// Publish appends one ticket per event in one round trip and returns, per
// event, the ticket's id or the error Redis gave.
func (q *Queue) Publish(ctx context.Context, events []domain.Event) ([]string, []error) {
	ids := make([]string, len(events))
	errs := make([]error, len(events))
	cmds := make([]*redis.StringCmd, len(events))
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range events {
			cmds[i] = p.XAdd(ctx, &redis.XAddArgs{Stream: q.stream, Values: encode(e)})
		}
		return nil
	})
	for i, cmd := range cmds {
		switch {
		case cmd == nil:
			errs[i] = err
		case cmd.Err() != nil:
			errs[i] = cmd.Err()
		default:
			ids[i] = cmd.Val()
		}
	}
	return ids, errs
}

// Holds reports, per ticket id, whether the stream still holds the ticket:
// waiting for a worker or in progress (acknowledged tickets are deleted).
func (q *Queue) Holds(ctx context.Context, ticketIDs []string) ([]bool, error) {
	cmds := make([]*redis.XMessageSliceCmd, len(ticketIDs))
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ticketIDs {
			cmds[i] = p.XRangeN(ctx, q.stream, id, id, 1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("look up tickets: %w", err)
	}
	held := make([]bool, len(ticketIDs))
	for i, c := range cmds {
		held[i] = len(c.Val()) > 0
	}
	return held, nil
}

// Read takes up to count new tickets for consumer, waiting up to block for
// the first (not at all when block <= 0). It returns no tickets and no error
// when none came.
func (q *Queue) Read(ctx context.Context, consumer string, count int, block time.Duration) ([]domain.Delivery, error) {
	if block <= 0 {
		block = -1 // no BLOCK argument: BLOCK 0 would wait forever
	}
	args := &redis.XReadGroupArgs{
		Group: q.group, Consumer: consumer, Streams: []string{q.stream, ">"}, Count: int64(count), Block: block,
	}
	streams, err := q.rdb.XReadGroup(ctx, args).Result()
	// Redis lost the stream (restart, flush): NOGROUP, or UNBLOCKED for a read
	// that was waiting when the key went. Make the group again and read on.
	if isNoGroup(err) || (err != nil && strings.HasPrefix(err.Error(), "UNBLOCKED")) {
		if err = q.EnsureGroup(ctx); err == nil {
			streams, err = q.rdb.XReadGroup(ctx, args).Result()
		}
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read tickets: %w", err)
	}
	var tickets []domain.Delivery
	for _, s := range streams {
		for _, m := range s.Messages {
			tickets = append(tickets, decode(m, 1))
		}
	}
	return tickets, nil
}

// ClaimStale takes over up to count tickets that other consumers (crashed or
// stuck) have held for longer than minIdle.
func (q *Queue) ClaimStale(ctx context.Context, consumer string, minIdle time.Duration, count int) ([]domain.Delivery, error) {
	pending, err := q.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: q.stream, Group: q.group, Idle: minIdle, Start: "-", End: "+", Count: int64(count),
	}).Result()
	if isNoGroup(err) || errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list stale tickets: %w", err)
	}
	if len(pending) == 0 {
		return nil, nil
	}
	ids := make([]string, len(pending))
	deliveries := make(map[string]int64, len(pending))
	for i, p := range pending {
		ids[i] = p.ID
		deliveries[p.ID] = p.RetryCount + 1 // XCLAIM counts one more delivery
	}
	msgs, err := q.rdb.XClaim(ctx, &redis.XClaimArgs{
		Stream: q.stream, Group: q.group, Consumer: consumer, MinIdle: minIdle, Messages: ids,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("claim stale tickets: %w", err)
	}
	tickets := make([]domain.Delivery, 0, len(msgs))
	for _, m := range msgs {
		tickets = append(tickets, decode(m, deliveries[m.ID]))
	}
	return tickets, nil
}

// Touch tells the group that consumer still works on the ticket, so that no
// other consumer claims it as stale.
func (q *Queue) Touch(ctx context.Context, consumer, messageID string) error {
	err := q.rdb.XClaimJustID(ctx, &redis.XClaimArgs{
		Stream: q.stream, Group: q.group, Consumer: consumer, Messages: []string{messageID},
	}).Err()
	if err != nil {
		return fmt.Errorf("touch ticket %s: %w", messageID, err)
	}
	return nil
}

// Ack acknowledges the ticket and deletes it from the stream, atomically.
func (q *Queue) Ack(ctx context.Context, messageID string) error {
	_, err := q.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, q.stream, q.group, messageID)
		p.XDel(ctx, q.stream, messageID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ack ticket %s: %w", messageID, err)
	}
	return nil
}

// DeadLetter copies the ticket with its cause to the dead-letter stream (for
// operators to look at; the outbox row is the record) and acknowledges it.
func (q *Queue) DeadLetter(ctx context.Context, t domain.Delivery, cause string) error {
	values := encode(t.Event)
	values = append(values, "cause", cause, "deliveries", t.Deliveries)
	err := q.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: q.dead, Values: values, MaxLen: 10000, Approx: true,
	}).Err()
	if err != nil {
		return fmt.Errorf("dead-letter ticket %s: %w", t.MessageID, err)
	}
	return q.Ack(ctx, t.MessageID)
}

// Pending returns how many tickets were delivered to workers and not yet
// acknowledged.
func (q *Queue) Pending(ctx context.Context) (int64, error) {
	p, err := q.rdb.XPending(ctx, q.stream, q.group).Result()
	if isNoGroup(err) || errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count pending tickets: %w", err)
	}
	return p.Count, nil
}

func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

func encode(e domain.Event) []any {
	return []any{
		"id", e.ID,
		"type", e.Type,
		"attempt", e.Attempt,
		"failures", e.Failures,
		"created", e.CreatedAt.UnixMicro(),
		"payload", string(e.Payload),
	}
}

// decode never fails: a malformed ticket decodes to an event with zero
// fields, which the worker rejects and parks as dead.
func decode(m redis.XMessage, deliveries int64) domain.Delivery {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	num := func(k string) int64 { n, _ := strconv.ParseInt(str(k), 10, 64); return n }
	return domain.Delivery{
		MessageID:  m.ID,
		Deliveries: deliveries,
		Event: domain.Event{
			ID:        num("id"),
			Type:      str("type"),
			Attempt:   int(num("attempt")),
			Failures:  int(num("failures")),
			CreatedAt: time.UnixMicro(num("created")),
			Payload:   []byte(str("payload")),
		},
	}
}
