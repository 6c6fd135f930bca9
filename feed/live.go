package feed

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
)

// What the live streams (package live) ask of the feeds.

// Posts returns the live posts among ids, in their order, from the post
// cache (PostgreSQL for what it misses): how a stream shows a post that a
// fan-out just announced.
func (f *Feeds) Posts(ctx context.Context, ids []int64) ([]domain.Post, error) {
	return f.hydrate(ctx, ids)
}

// Following reports, for each reader, whether they follow author now, as
// their following hash says (the one the push script checks): 1 yes, 0 no,
// -1 unknown — the hash is not in Redis (the reader's feed expired or was
// lost), and the next read of the feed rebuilds it.
func (f *Feeds) Following(ctx context.Context, readers []int64, author int64) ([]int, error) {
	field := strconv.FormatInt(author, 10)
	cmds, err := f.followingFields(ctx, readers, field, versionField)
	if err != nil {
		return nil, fmt.Errorf("read whom readers follow: %w", err)
	}
	out := make([]int, len(readers))
	for i, c := range cmds {
		v := c.Val()
		switch {
		case len(v) < 2 || v[1] == nil:
			out[i] = -1 // no hash: no version field
		case v[0] != nil && followed(field, v[0]):
			out[i] = 1
		}
	}
	return out, nil
}

// Hiding reports, for each reader, whether their feed hides author (a mute,
// or a block either way) as their following hash says, in one round trip
// for them all: 1 yes, 0 no, -1 unknown — the hash is not in Redis, and the
// next read of the feed rebuilds it. A hub asks it once for every stream a
// post goes to, where each stream asking alone cost Redis a round trip per
// reader and post.
func (f *Feeds) Hiding(ctx context.Context, readers []int64, author int64) ([]int, error) {
	cmds, err := f.followingFields(ctx, readers, versionField, mergesField, hidesField)
	if err != nil {
		return nil, fmt.Errorf("read whom readers hide: %w", err)
	}
	out := make([]int, len(readers))
	for i, c := range cmds {
		v := c.Val()
		if !hashComplete(v) {
			out[i] = -1
			continue
		}
		raw, _ := v[2].(string)
		if _, hidden := slices.BinarySearch(parseHides(raw), author); hidden {
			out[i] = 1
		}
	}
	return out, nil
}

// followingFields reads fields of each reader's following hash, in one
// pipeline.
func (f *Feeds) followingFields(ctx context.Context, readers []int64, fields ...string) ([]*redis.SliceCmd, error) {
	cmds := make([]*redis.SliceCmd, len(readers))
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range readers {
			cmds[i] = p.HMGet(ctx, f.keys.following(r), fields...)
		}
		return nil
	})
	return cmds, err
}
