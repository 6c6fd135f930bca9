package feed

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// SeedEmpty writes, for each reader (mapped to everyone they follow), the
// state their first read leaves when none of their followees has posted
// yet: a complete, whole, empty feed and their following hash. The bench and
// the tests use it to give a large graph of readers their feeds without a
// request each; the keys and markers stay this package's business.
func (f *Feeds) SeedEmpty(ctx context.Context, readers map[int64][]int64) error {
	metaV, headV, _ := setValues(nil, f.cfg.MaxLen, true)
	return f.seed(ctx, readers, func(p redis.Pipeliner, set setKeys) {
		p.Set(ctx, set.meta, metaV, f.cfg.ActiveTTL)
		p.Set(ctx, set.head, headV, f.cfg.ActiveTTL)
	})
}

// seed writes each reader's feed with write and their following hash.
func (f *Feeds) seed(ctx context.Context, readers map[int64][]int64, write func(p redis.Pipeliner, set setKeys)) error {
	users := make([]int64, 0, len(readers))
	for u := range readers {
		users = append(users, u)
	}
	const batch = 500 // readers per pipeline: a few commands each
	for start := 0; start < len(users); start += batch {
		_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, u := range users[start:min(start+batch, len(users))] {
				set, following := f.keys.feedSet(u), f.keys.following(u)
				p.Del(ctx, append(set.list(), following)...)
				write(p, set)
				fields := []any{versionField, randomVersion(), hidesField, "", u, 1} // they see their own posts
				for _, followee := range readers[u] {
					fields = append(fields, followee, 1)
				}
				p.HSet(ctx, following, fields...)
				p.Expire(ctx, following, f.cfg.ActiveTTL)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("seed feeds: %w", err)
		}
	}
	return nil
}

// SeedFull writes, for each reader (mapped to everyone they follow), a
// complete feed holding postIDs (the newest max_len of them) and their
// following hash, as if their feed had been read and filled: the bench
// uses it to measure fan-out and memory at full feeds. The ids must be of
// posts older than any the caller pushes next.
func (f *Feeds) SeedFull(ctx context.Context, readers map[int64][]int64, postIDs []int64) error {
	metaV, headV, tail := setValues(postIDs, f.cfg.MaxLen, false)
	return f.seed(ctx, readers, func(p redis.Pipeliner, set setKeys) {
		p.Set(ctx, set.meta, metaV, f.cfg.ActiveTTL)
		p.Set(ctx, set.head, headV, f.cfg.ActiveTTL)
		if len(tail) > 0 {
			p.RPush(ctx, set.tail, tail...)
			p.Expire(ctx, set.tail, f.cfg.ActiveTTL)
		}
	})
}
