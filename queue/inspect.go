package queue

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
)

// Inspect returns, for every partition this queue reads (its configured ones
// and those another count registered), the stream's length, the consumer
// group's pending list by consumer (XPENDING's summary) and how many
// tickets were dead-lettered from it: what an operator looks at when
// delivery is late. One pipeline of three commands a partition.
func (q *Queue) Inspect(ctx context.Context) ([]domain.QueuePartition, error) {
	parts, err := q.knownPartitions(ctx)
	if err != nil {
		return nil, err
	}
	type partCmds struct {
		length, dead *redis.IntCmd
		pending      *redis.XPendingCmd
	}
	cmds := make([]partCmds, len(parts))
	_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, part := range parts {
			cmds[i] = partCmds{
				length:  p.XLen(ctx, q.Key(part)),
				pending: p.XPending(ctx, q.Key(part), q.group),
				dead:    p.XLen(ctx, q.DeadKey(part)),
			}
		}
		return nil
	})
	out := make([]domain.QueuePartition, len(parts))
	for i, part := range parts {
		c := cmds[i]
		for _, cmd := range []*redis.IntCmd{c.length, c.dead} {
			if err := cmd.Err(); err != nil {
				return nil, fmt.Errorf("inspect %s: %w", q.Key(part), err)
			}
		}
		out[i] = domain.QueuePartition{Partition: part, Stream: q.Key(part), Length: c.length.Val(), DeadLetters: c.dead.Val()}
		switch err := c.pending.Err(); {
		case isNoGroup(err):
			// No group on the stream (a missing stream gives this too):
			// nothing was delivered from it.
			out[i].NoGroup = true
			continue
		case isNil(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("inspect the pending tickets of %s: %w", q.Key(part), err)
		}
		summary := c.pending.Val()
		out[i].Pending = summary.Count
		if summary.Count > 0 {
			out[i].OldestPendingID = summary.Lower
		}
		for name, n := range summary.Consumers {
			out[i].Consumers = append(out[i].Consumers, domain.ConsumerPending{Name: name, Pending: n})
		}
		slices.SortFunc(out[i].Consumers, func(a, b domain.ConsumerPending) int { return strings.Compare(a.Name, b.Name) })
	}
	return out, nil
}
