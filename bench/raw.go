package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// rawSets are throw-away sorted sets under the bench's prefix that stand for
// feeds in the limits: what a team that stores each feed as a plain sorted
// set (member = score = post id) writes and keeps.
type rawSets struct {
	r    *runner
	n    int
	name string // "raw" → prefix + "raw:{i}"
}

func (r *runner) rawSets(name string, n int) rawSets { return rawSets{r: r, n: n, name: name} }

// key is set i's key: a hash tag of its own, so that on a Redis Cluster the
// sets spread over the shards as feeds do.
func (s rawSets) key(i int) string { return s.r.h.Prefix + s.name + ":{" + strconv.Itoa(i) + "}" }

// Sorted sets in Redis' default encoding. A sorted set of more than
// zset-max-listpack-entries members (128 by default), or with a member
// longer than zset-max-listpack-value (64), is a skiplist, and stays one
// when it shrinks. A feed of 800 entries is one on a Redis configured as it
// comes, which is what a team would run; but the server the bench measures
// may be set to keep larger sets in listpacks (for our feeds), and the raw
// sets must not profit from it. So each raw set that stands for a feed
// starts with one member longer than the server's zset-max-listpack-value
// (a skiplist from its first member, whatever the settings), removed again
// once the set holds its entries: a set made so is exactly what the default
// settings give (OBJECT ENCODING says it, in the stage's note).

// markerMember is a member longer than maxValue bytes (the server's
// zset-max-listpack-value), which makes its sorted set a skiplist.
func markerMember(maxValue int) string {
	const head = "raw-skiplist-marker:"
	return head + strings.Repeat("x", max(maxValue+1-len(head), 1))
}

// maxMarker bounds the marker member: a server whose
// zset-max-listpack-value is larger is not forced (the note then says which
// encoding the raw sets had).
const maxMarker = 64 << 10

// marker is the member that makes a raw set a skiplist ("" when the
// server's setting cannot be read or is too large to beat).
func (s rawSets) marker(ctx context.Context) string {
	vals, err := s.r.rdb.ConfigGet(ctx, "zset-max-listpack-value").Result()
	if err != nil {
		return markerMember(64) // CONFIG disabled: assume the default
	}
	v, err := strconv.Atoi(vals["zset-max-listpack-value"])
	if err != nil || v > maxMarker {
		return ""
	}
	return markerMember(v)
}

// create makes every set a skiplist holding prefill (member = score = id).
// With no prefill each set keeps the marker, below every entry (score 0,
// as our feeds keep their markers): a sorted set cannot be empty. It
// returns the sets' encoding (OBJECT ENCODING of the first).
func (s rawSets) create(ctx context.Context, prefill []int64) (string, error) {
	marker := s.marker(ctx)
	members := make([]redis.Z, len(prefill))
	for i, id := range prefill {
		members[i] = redis.Z{Score: float64(id), Member: id}
	}
	const perPipeline = 10 // sets: a pipeline of at most ~10 × 800 members
	for start := 0; start < s.n; start += perPipeline {
		_, err := s.r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < min(start+perPipeline, s.n); i++ {
				p.Del(ctx, s.key(i))
				if marker != "" {
					p.ZAdd(ctx, s.key(i), redis.Z{Score: 0, Member: marker})
				}
				if len(members) > 0 {
					p.ZAdd(ctx, s.key(i), members...)
					if marker != "" {
						p.ZRem(ctx, s.key(i), marker)
					}
				}
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("raw sorted sets: %w", err)
		}
	}
	if s.n == 0 {
		return "", nil
	}
	enc, err := s.r.rdb.ObjectEncoding(ctx, s.key(0)).Result()
	if err != nil && !isNil(err) {
		return "", fmt.Errorf("raw sorted sets: OBJECT ENCODING: %w", err)
	}
	return enc, nil
}

// write adds n entries with plain pipelined ZADD, PageSize per pipeline,
// from clients goroutines, one member per page to PageSize sets in turn (as
// a post goes to a page of followers), members from first up, and returns
// how long the writes took.
func (s rawSets) write(ctx context.Context, n, clients int, first int64) (time.Duration, error) {
	size := s.r.opts.PageSize
	pages := (n + size - 1) / size
	var next atomic.Int64
	var wg sync.WaitGroup
	var zerr atomic.Value
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := next.Add(1) - 1; p < int64(pages); p = next.Add(1) - 1 {
				_, err := s.r.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
					for i := range size {
						pipe.ZAdd(ctx, s.key((int(p)*size+i)%s.n), redis.Z{Score: float64(first + p), Member: first + p})
					}
					return nil
				})
				if err != nil {
					zerr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := zerr.Load().(error); err != nil {
		return 0, fmt.Errorf("raw ZADD: %w", err)
	}
	return elapsed, nil
}

// drop deletes the sets, at once (DEL, not UNLINK: the freeing is not left
// to Redis' background thread, whose CPU the next measurement would count).
func (s rawSets) drop(ctx context.Context) error {
	for start := 0; start < s.n; start += 1000 {
		if _, err := s.r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < min(start+1000, s.n); i++ {
				p.Del(ctx, s.key(i))
			}
			return nil
		}); err != nil {
			return fmt.Errorf("raw sorted sets: %w", err)
		}
	}
	return nil
}

// randomFirst is where the members of raw ZADDs into sets of nothing else
// start: random, so that no run meets members left by another.
func randomFirst() int64 { return rand.Int64N(1 << 40) }
