package bench

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/feed"
)

// What feeds cost Redis in memory, read from outside: MEMORY USAGE of every
// key that holds a feed (feed.StorageKeys: how the feed package stores a
// feed is its own business).

// feedBytes is MEMORY USAGE (every element counted, the keys included)
// summed over the keys that hold each user's feed; 0 for a user without one.
func (r *runner) feedBytes(ctx context.Context, users []int64) ([]int64, error) {
	keys := make([][]string, len(users))
	var all []string
	for i, u := range users {
		keys[i] = feed.StorageKeys(r.h.Prefix, u)
		all = append(all, keys[i]...)
	}
	mem, err := r.memoryUsage(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("feed memory: %w", err)
	}
	out := make([]int64, len(users))
	k := 0
	for i := range users {
		for range keys[i] {
			out[i] += mem[k]
			k++
		}
	}
	return out, nil
}

// memoryUsage is MEMORY USAGE key SAMPLES 0 of each key (0 for a key that
// does not exist), pipelined.
func (r *runner) memoryUsage(ctx context.Context, keys []string) ([]int64, error) {
	out := make([]int64, len(keys))
	const batch = 1000
	for start := 0; start < len(keys); start += batch {
		part := keys[start:min(start+batch, len(keys))]
		cmds := make([]*redis.IntCmd, len(part))
		if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range part {
				cmds[i] = p.MemoryUsage(ctx, k, 0) // every element counted
			}
			return nil
		}); err != nil && !isNil(err) {
			return nil, err
		}
		for i, c := range cmds {
			if err := c.Err(); err != nil && !isNil(err) {
				return nil, fmt.Errorf("MEMORY USAGE %s: %w", part[i], err)
			}
			out[start+i] = c.Val()
		}
	}
	return out, nil
}

// feedEntries counts the post entries (not the markers) in each user's
// feed, where the feed is a sorted set that can be counted from outside
// (ZCOUNT of the scores from 1). countable is false when a feed is held in
// another encoding, whose entries only the feed package can count: the
// stages that need the count then know it otherwise or leave it out.
func (r *runner) feedEntries(ctx context.Context, users []int64) (counts []int64, countable bool, err error) {
	types := make([]*redis.StatusCmd, len(users))
	if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range users {
			types[i] = p.Type(ctx, r.feedKey(u))
		}
		return nil
	}); err != nil {
		return nil, false, fmt.Errorf("feed entries: %w", err)
	}
	for _, t := range types {
		if v := t.Val(); v != "zset" && v != "none" {
			return nil, false, nil
		}
	}
	cards := make([]*redis.IntCmd, len(users))
	if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range users {
			cards[i] = p.ZCount(ctx, r.feedKey(u), "1", "+inf") // post ids score 1 and up
		}
		return nil
	}); err != nil {
		return nil, false, fmt.Errorf("feed entries: %w", err)
	}
	counts = make([]int64, len(users))
	for i, c := range cards {
		counts[i] = c.Val()
	}
	return counts, true, nil
}

// perEntry is bytes per entry (0 with no entries).
func perEntry(bytes, entries int64) float64 {
	if entries <= 0 {
		return 0
	}
	return float64(bytes) / float64(entries)
}

// ratio is a / b, 0 when b is.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
