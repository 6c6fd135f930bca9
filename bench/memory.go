package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/feed"
)

// What feeds cost Redis in memory, read from outside: MEMORY USAGE of every
// key that holds a feed (feed.StorageKeys: how the feed package stores a
// feed is its own business), and INFO memory's used_memory before and after
// feeds fill up.

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

// feedEntries counts the post entries in each user's feed, as the feed
// package reads them (feed.InspectMany). countable is always true; it stays
// for the stages that report a count only when there is one.
func (r *runner) feedEntries(ctx context.Context, users []int64) (counts []int64, countable bool, err error) {
	counts = make([]int64, 0, len(users))
	for start := 0; start < len(users); start += 1000 {
		feeds, err := feed.InspectMany(ctx, r.rdb, r.h.Prefix, users[start:min(start+1000, len(users))])
		if err != nil {
			return nil, false, fmt.Errorf("feed entries: %w", err)
		}
		for _, f := range feeds {
			counts = append(counts, int64(len(f.IDs)))
		}
	}
	return counts, true, nil
}

// storageEncodings names each key of a user's feed with its encoding
// (OBJECT ENCODING): "feed:{1000000} skiplist".
func (r *runner) storageEncodings(ctx context.Context, user int64) string {
	var parts []string
	for _, k := range feed.StorageKeys(r.h.Prefix, user) {
		enc, err := r.rdb.ObjectEncoding(ctx, k).Result()
		if err != nil {
			enc = "missing"
		}
		parts = append(parts, strings.TrimPrefix(k, r.h.Prefix)+" "+enc)
	}
	return strings.Join(parts, ", ")
}

// memInfo is what INFO memory says, summed over the primaries.
type memInfo struct {
	used    int64 // used_memory: every allocation, the clients' buffers included
	clients int64 // mem_clients_normal: the buffers of the normal clients
	// lazyfree is lazyfree_pending_objects: values that a background
	// thread still has to free (UNLINK, lazyfree-lazy-user-del).
	lazyfree int64
}

// grown is the memory that data took between two readings: used_memory's
// growth less that of the clients' buffers (a connection that sent a large
// pipeline keeps its query buffer for a while).
func (m memInfo) grown(before memInfo) int64 {
	return (m.used - before.used) - (m.clients - before.clients)
}

// parseMemInfo reads used_memory, mem_clients_normal and
// lazyfree_pending_objects from INFO memory.
func parseMemInfo(info string) (memInfo, error) {
	var m memInfo
	var seen bool
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "used_memory":
			dst, seen = &m.used, true
		case "mem_clients_normal":
			dst = &m.clients
		case "lazyfree_pending_objects":
			dst = &m.lazyfree
		default:
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return memInfo{}, fmt.Errorf("INFO memory %s: %q", k, v)
		}
		*dst = n
	}
	if !seen {
		return memInfo{}, fmt.Errorf("INFO memory: no used_memory")
	}
	return m, nil
}

// redisMemory reads INFO memory of every primary, summed, once nothing is
// left to free in the background (for at most 10 s).
func (r *runner) redisMemory(ctx context.Context) (memInfo, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		nodes, err := primaries(ctx, r.rdb)
		if err != nil {
			return memInfo{}, err
		}
		var sum memInfo
		for _, n := range nodes {
			info, err := n.Info(ctx, "memory").Result()
			if err != nil {
				return memInfo{}, fmt.Errorf("INFO memory on %s: %w", n.Options().Addr, err)
			}
			m, err := parseMemInfo(info)
			if err != nil {
				return memInfo{}, fmt.Errorf("%s: %w", n.Options().Addr, err)
			}
			sum.used, sum.clients, sum.lazyfree = sum.used+m.used, sum.clients+m.clients, sum.lazyfree+m.lazyfree
		}
		if sum.lazyfree == 0 || time.Now().After(deadline) {
			return sum, nil
		}
		select {
		case <-ctx.Done():
			return memInfo{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// perEntry is bytes per entry (0 with no entries).
func perEntry(bytes, entries int64) float64 {
	if entries <= 0 {
		return 0
	}
	return float64(bytes) / float64(entries)
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

// gbPerMillion is the Redis memory, in GB (10⁹ bytes), of a million feeds
// of entriesPerFeed entries at bytesPerEntry each.
func gbPerMillion(bytesPerEntry float64, entriesPerFeed int) float64 {
	return bytesPerEntry * float64(entriesPerFeed) * 1e6 / 1e9
}

// ratio is a / b, 0 when b is.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
