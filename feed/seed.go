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
	users := make([]int64, 0, len(readers))
	for u := range readers {
		users = append(users, u)
	}
	const batch = 500 // readers per pipeline: a few commands each
	for start := 0; start < len(users); start += batch {
		_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, u := range users[start:min(start+batch, len(users))] {
				feed, following := f.keys.feed(u), f.keys.following(u)
				p.Del(ctx, feed, following)
				p.ZAdd(ctx, feed, redis.Z{Score: 0, Member: completeMarker}, redis.Z{Score: 0.5, Member: wholeMarker})
				p.Expire(ctx, feed, f.cfg.ActiveTTL)
				fields := []any{versionField, randomVersion()}
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
