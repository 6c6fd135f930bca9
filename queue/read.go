package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
)

// How a worker reads every partition. One XREADGROUP can name several
// streams, but on a Redis Cluster every key of a command must be in one
// slot, and each partition is in a slot of its own; COUNT, moreover, bounds
// each stream, not the reply, so one call over k streams may deliver k times
// what the worker has room for, and a ticket delivered but not returned
// waits for a takeover. So Read takes tickets in passes: one pipeline of one
// XREADGROUP (no BLOCK) per partition, the count shared out among them (on
// a cluster go-redis sends each node its part of the pipeline, at once),
// again among those that filled their share until the count is reached or
// every partition is empty. When the count is smaller than the partitions,
// some get no share: a look at every partition first (XINFO GROUPS and the
// last entry, one pipeline, nothing taken) finds those with tickets, so
// that a sparse queue costs two round trips, not one a partition. To wait,
// a reader blocks on the bell, a stream
// of one entry that every Publish appends to after its tickets: it takes
// the bell's last id, makes one more pass (anything published before that
// id is visible to it), and blocks in XREAD for an entry after that id. The
// wait costs Redis nothing while the queue is idle, and no wake-up is lost.
// A queue of one partition blocks in XREADGROUP on its stream, as ever.

// Read takes up to count new tickets for consumer from every partition,
// waiting up to block for the first (not at all when block <= 0), and
// returns within block and blockGrace whatever Redis does. It returns
// no tickets and no error when none came. When some partitions answered and
// others failed, it returns the tickets it took together with the error:
// they are the consumer's now, and must be processed.
func (q *Queue) Read(ctx context.Context, consumer string, count int, block time.Duration) ([]domain.Delivery, error) {
	ctx, cancel := blocking(ctx, block)
	defer cancel()
	parts, setErr := q.knownPartitions(ctx)
	if len(parts) > q.partitions {
		setErr = errors.Join(setErr, q.retire(ctx))
		parts, _ = q.knownPartitions(ctx)
	}
	if len(parts) == 1 {
		tickets, err := q.readOne(ctx, parts[0], consumer, count, block)
		return tickets, errors.Join(setErr, err)
	}
	tickets, err := q.pass(ctx, parts, consumer, count)
	if len(tickets) > 0 || err != nil || setErr != nil || block <= 0 {
		return tickets, errors.Join(setErr, err)
	}
	deadline := time.Now().Add(block)
	bell, err := q.bellID(ctx)
	if err != nil {
		return nil, err
	}
	for {
		tickets, err := q.pass(ctx, parts, consumer, count)
		if len(tickets) > 0 || err != nil {
			return tickets, err
		}
		wait := time.Until(deadline)
		if wait < time.Millisecond {
			return nil, nil
		}
		var rang bool
		bell, rang, err = q.waitBell(ctx, bell, wait)
		if err != nil || !rang {
			return nil, err
		}
	}
}

// blockGrace is how much longer than its block time a Read waits for Redis
// to answer, its other calls included: go-redis gives a blocking read's
// socket 10 s more than the block, which a silent Redis would take whole.
const blockGrace = time.Second

// blocking bounds a Read that blocks for block: its context ends blockGrace
// after the block time (go-redis, with ContextTimeoutEnabled, takes the
// deadline to the socket).
func blocking(ctx context.Context, block time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(block, 0)+blockGrace)
}

// readOne reads one partition, blocking in XREADGROUP.
func (q *Queue) readOne(ctx context.Context, part int, consumer string, count int, block time.Duration) ([]domain.Delivery, error) {
	if block <= 0 {
		block = -1 // no BLOCK argument: BLOCK 0 would wait forever
	}
	args := &redis.XReadGroupArgs{
		Group: q.group, Consumer: consumer, Streams: []string{q.Key(part), ">"}, Count: int64(count), Block: block,
	}
	streams, err := q.rdb.XReadGroup(ctx, args).Result()
	// Redis lost the stream (restart, flush): NOGROUP, or UNBLOCKED for a read
	// that was waiting when the key went. Make the group again and read on.
	if isNoGroup(err) || isUnblocked(err) {
		if err = q.ensureGroup(ctx, part); err == nil {
			streams, err = q.rdb.XReadGroup(ctx, args).Result()
		}
	}
	if isNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read tickets: %w", err)
	}
	var tickets []domain.Delivery
	for _, s := range streams {
		for _, m := range s.Messages {
			tickets = append(tickets, decode(part, m, 1))
		}
	}
	return tickets, nil
}

// pass takes up to count tickets from parts without waiting: the count is
// shared out among the partitions, starting at a different one each time,
// and what a partition that returned less than its share left is shared
// out again among those that filled theirs.
func (q *Queue) pass(ctx context.Context, parts []int, consumer string, count int) ([]domain.Delivery, error) {
	active := q.rotate(parts)
	if count < len(active) {
		// Some partitions get no share: find those with tickets first, or
		// a sparse queue would be searched one round trip at a time.
		active = q.withTickets(ctx, active)
	}
	var tickets []domain.Delivery
	var errs []error
	regrouped := map[int]bool{}
	for len(tickets) < count && len(active) > 0 {
		remaining := count - len(tickets)
		shares := make([]int, len(active))
		for i := range shares {
			shares[i] = remaining / len(active)
			if i < remaining%len(active) {
				shares[i]++
			}
		}
		cmds := make([]*redis.XStreamSliceCmd, len(active))
		_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, part := range active {
				if shares[i] > 0 {
					cmds[i] = p.XReadGroup(ctx, &redis.XReadGroupArgs{
						Group: q.group, Consumer: consumer, Streams: []string{q.Key(part), ">"},
						Count: int64(shares[i]), Block: -1,
					})
				}
			}
			return nil
		})
		var next []int
		for i, part := range active {
			c := cmds[i]
			if c == nil {
				next = append(next, part) // no share this round
				continue
			}
			err := c.Err()
			switch {
			case isNil(err): // empty
			case isNoGroup(err) && !regrouped[part]:
				// Redis lost the stream, or it was written before any
				// group: make the group and read it again.
				regrouped[part] = true
				if gerr := q.ensureGroup(ctx, part); gerr == nil {
					next = append(next, part)
				} else if part < q.partitions {
					errs = append(errs, gerr)
				} // else: a partition beyond the count that is gone
			case err != nil:
				errs = append(errs, fmt.Errorf("read tickets of %s: %w", q.Key(part), err))
			default:
				n := 0
				for _, s := range c.Val() {
					for _, m := range s.Messages {
						tickets = append(tickets, decode(part, m, 1))
						n++
					}
				}
				if n == shares[i] {
					next = append(next, part) // it may hold more
				}
			}
		}
		active = next
	}
	return tickets, errors.Join(errs...)
}

// withTickets returns, in one round trip and without taking any, the
// partitions of parts that hold tickets not yet delivered to the group: the
// stream's last entry is after the group's last delivered one. A partition
// whose group is missing is kept (the read makes the group), and so is one
// that cannot tell (the read reports its error).
func (q *Queue) withTickets(ctx context.Context, parts []int) []int {
	groups := make([]*redis.XInfoGroupsCmd, len(parts))
	lasts := make([]*redis.XMessageSliceCmd, len(parts))
	_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, part := range parts {
			groups[i] = p.XInfoGroups(ctx, q.Key(part))
			lasts[i] = p.XRevRangeN(ctx, q.Key(part), "+", "-", 1)
		}
		return nil
	})
	var with []int
	for i, part := range parts {
		if lasts[i].Err() == nil && len(lasts[i].Val()) == 0 {
			continue // empty, or no stream
		}
		if groups[i].Err() != nil || lasts[i].Err() != nil {
			with = append(with, part)
			continue
		}
		delivered := ""
		for _, g := range groups[i].Val() {
			if g.Name == q.group {
				delivered = g.LastDeliveredID
			}
		}
		if delivered == "" || entryAfter(lasts[i].Val()[0].ID, delivered) {
			with = append(with, part)
		}
	}
	return with
}

// entryAfter reports whether stream entry id a comes after b; an id that
// does not parse comes after everything (the read will tell).
func entryAfter(a, b string) bool {
	ams, aseq, aok := parseEntry(a)
	bms, bseq, bok := parseEntry(b)
	if !aok || !bok {
		return true
	}
	return ams > bms || (ams == bms && aseq > bseq)
}

func parseEntry(id string) (ms, seq uint64, ok bool) {
	m, s, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseUint(m, 10, 64)
	seq, err2 := strconv.ParseUint(s, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}

// rotate returns parts starting at the next one in turn.
func (q *Queue) rotate(parts []int) []int {
	start := int(q.turn.Add(1) % uint64(len(parts))) //nolint:gosec // below len(parts)
	return append(slices.Clone(parts[start:]), parts[:start]...)
}

// bellID returns the id of the bell's last ring, or 0-0.
func (q *Queue) bellID(ctx context.Context) (string, error) {
	msgs, err := q.rdb.XRevRangeN(ctx, q.BellKey(), "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("read the bell %s: %w", q.BellKey(), err)
	}
	if len(msgs) == 0 {
		return "0-0", nil
	}
	return msgs[0].ID, nil
}

// waitBell blocks for up to wait until the bell rings after id, and returns
// the id of that ring.
func (q *Queue) waitBell(ctx context.Context, id string, wait time.Duration) (string, bool, error) {
	streams, err := q.rdb.XRead(ctx, &redis.XReadArgs{
		Streams: []string{q.BellKey(), id}, Count: 1, Block: wait,
	}).Result()
	if isNil(err) {
		return id, false, nil
	}
	if err != nil {
		return id, false, fmt.Errorf("wait for tickets: %w", err)
	}
	for _, s := range streams {
		for _, m := range s.Messages {
			id = m.ID
		}
	}
	return id, true, nil
}

// ClaimStale takes over up to count tickets, from every partition, that
// other consumers (crashed or stuck) have held for longer than minIdle. Like
// Read, it returns the tickets it took with the error of a partition that
// failed.
func (q *Queue) ClaimStale(ctx context.Context, consumer string, minIdle time.Duration, count int) ([]domain.Delivery, error) {
	parts, setErr := q.knownPartitions(ctx)
	parts = q.rotate(parts)
	pendings := make([]*redis.XPendingExtCmd, len(parts))
	_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, part := range parts {
			pendings[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{
				Stream: q.Key(part), Group: q.group, Idle: minIdle, Start: "-", End: "+", Count: int64(count),
			})
		}
		return nil
	})
	errs := []error{setErr}
	// The stale tickets of each partition, count in all, and their delivery
	// counts (XCLAIM counts one more); entry ids repeat across partitions.
	ids := make([][]string, len(parts))
	deliveries := make([]map[string]int64, len(parts))
	left := count
	for i, c := range pendings {
		err := c.Err()
		if isNoGroup(err) || isNil(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list stale tickets of %s: %w", q.Key(parts[i]), err))
			continue
		}
		deliveries[i] = map[string]int64{}
		for _, p := range c.Val() {
			if left == 0 {
				break
			}
			ids[i] = append(ids[i], p.ID)
			deliveries[i][p.ID] = p.RetryCount + 1
			left--
		}
	}
	if left == count {
		return nil, errors.Join(errs...)
	}
	claims := make([]*redis.XMessageSliceCmd, len(parts))
	_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, part := range parts {
			if len(ids[i]) > 0 {
				claims[i] = p.XClaim(ctx, &redis.XClaimArgs{
					Stream: q.Key(part), Group: q.group, Consumer: consumer, MinIdle: minIdle, Messages: ids[i],
				})
			}
		}
		return nil
	})
	var tickets []domain.Delivery
	for i, c := range claims {
		if c == nil {
			continue
		}
		msgs, err := c.Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("claim stale tickets of %s: %w", q.Key(parts[i]), err))
			continue
		}
		for _, m := range msgs {
			tickets = append(tickets, decode(parts[i], m, deliveries[i][m.ID]))
		}
	}
	return tickets, errors.Join(errs...)
}
