package feed_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
)

// Found by a review of the meta, head and tail layout: a set is three keys, so
// what reads them must read them at one moment, and what recreates one of
// them by accident must not leave it behind.

// failHook fails every script call once armed (as a timeout, a crash or a
// lost connection would, between the two steps of a push).
type failHook struct{ after, armed *atomic.Bool }

func (h failHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h failHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() {
			for _, c := range cmds {
				if n := c.Name(); n == "evalsha" || n == "eval" {
					return errors.New("connection lost")
				}
			}
		}
		err := next(ctx, cmds)
		if h.after.Load() {
			h.armed.Store(true) // after the first step
		}
		return err
	}
}

// A head lost apart from its meta, then a first push whose second step
// never runs (the worker's context ran out, it crashed, the connection
// broke; the post was deleted before a retry): appendScript's APPEND made
// a head without a time to live, which outlived the meta for good.
func TestAppendToLostHeadLeavesNoKeyWithoutTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	p1 := b.post(t, 1)
	require.Equal(t, []int64{p1}, b.readAll(t, 10, 20))
	keys := feed.StorageKeys(b.prefix, 10)
	require.NoError(t, b.rdb.Del(ctx, keys[1]).Err()) // the head is evicted

	var after, armed atomic.Bool
	b.rdb.AddHook(failHook{after: &after, armed: &armed})
	after.Store(true)
	p2 := b.post(t, 1)
	_, _ = pushCount(b.feeds.Push(ctx, domain.Entry{PostID: p2, AuthorID: 1}, []int64{10}, b.now(t), true)) // a second step, if any, fails
	armed.Store(false)
	after.Store(false)
	require.Zero(t, b.rdb.Exists(ctx, keys[0], keys[1]).Val(), "the set whose head was lost is dropped by the first step")

	for _, k := range keys {
		ttl, err := b.rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		require.NotEqual(t, time.Duration(-1), ttl, "%s left without a time to live (it never expires)", k)
	}
	require.Equal(t, []int64{p2, p1}, b.readAll(t, 10, 20), "rebuilt by the next read")
}

// splitHook runs action once between a pipeline's GET of key and the rest of
// it, as Redis does when a pipeline spans two reads of its socket and serves
// another client's script in between. A script that reads key (or a
// transaction) cannot be split so: another client's script runs before or
// after all of it — here, before.
type splitHook struct {
	key    string
	once   *sync.Once
	action func()
}

func (h splitHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h splitHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h splitHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for i, c := range cmds {
			a := c.Args()
			if n := c.Name(); (n == "evalsha" || n == "eval") && slices.Contains(a, any(h.key)) {
				first := false
				h.once.Do(func() { first = true })
				if first {
					h.action() // outside the Once: it may come through this hook itself
				}
				break
			}
			if c.Name() == "get" && len(a) == 2 && a[1] == h.key && i+1 < len(cmds) {
				split := false
				h.once.Do(func() { split = true })
				if !split {
					break
				}
				if cmds[0].Name() == "multi" {
					h.action()
					return next(ctx, cmds)
				}
				err1 := next(ctx, cmds[:i+1])
				h.action()
				err2 := next(ctx, cmds[i+1:])
				if err1 != nil {
					return err1
				}
				return err2
			}
		}
		return next(ctx, cmds)
	}
}

// A read that read the meta and then the rest of the set in commands another
// client's script could come between: a spill that trims a whole feed at the
// cap between them left the read with the old meta ("whole", the same
// tailN) and the new entries, and the trimmed post was gone from the feed
// with no PostgreSQL read below it.
func TestReadIsOneMomentAcrossATrim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{MaxLen: 12}) // spillAt 2, keep 1
	b.follow(t, 10, 1)
	var ids []int64
	for range 11 {
		ids = append(ids, b.post(t, 1))
	}
	require.Equal(t, reversed(ids), b.readAll(t, 10, 20)) // whole: 11 < 12
	ids = append(ids, b.post(t, 1))
	_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: ids[11], AuthorID: 1}, []int64{10}, b.now(t), true))
	require.NoError(t, err)
	s := b.stored(t, 10)
	require.True(t, s.Whole)
	require.Len(t, s.IDs, 12)

	last := b.post(t, 1)
	ids = append(ids, last)
	asOf := b.now(t)
	b.rdb.AddHook(splitHook{key: feed.Key(b.prefix, 10), once: &sync.Once{}, action: func() {
		_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: last, AuthorID: 1}, []int64{10}, asOf, true)) // spills, trims ids[0]
		require.NoError(t, err)
	}})
	page, err := b.feeds.Read(ctx, 10, 0, 20)
	require.NoError(t, err)
	var got []int64
	for _, p := range page.Posts {
		got = append(got, p.ID)
	}
	require.Equal(t, reversed(ids), got, "the first page, read while the feed was trimmed")
}

// The same with a rebuild starting in between (it writes an empty head under
// a new meta): the old meta said complete and whole, the new head was
// empty, and so was the page.
func TestReadIsOneMomentAcrossARebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	p := b.post(t, 1)
	require.Equal(t, []int64{p}, b.readAll(t, 10, 20)) // whole, head [p], no tail
	b.rdb.AddHook(splitHook{key: feed.Key(b.prefix, 10), once: &sync.Once{}, action: func() {
		require.NoError(t, feed.WriteBuilding(ctx, b.rdb, b.prefix, 10, time.Minute)) // another reader's rebuild starts
	}})
	page, err := b.feeds.Read(ctx, 10, 0, 20)
	require.NoError(t, err)
	require.Len(t, page.Posts, 1, "the feed holds one post")
}
