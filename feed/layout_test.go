package feed_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
)

// checkLayout reads user's feed keys raw and checks the layout invariants of
// encoding.go: ascending chunks, chunks ascending, no repeats in the tail
// and none between head and tail (the head may hold its entries in any
// order, and one twice), tailN and tailMax right, every tail entry ≤
// tailMax < every head entry, a non-empty head whenever the tail is
// non-empty, and a tail that expires when the head does.
func (b *bundle) checkLayout(t *testing.T, user int64) {
	t.Helper()
	b.checkLayoutTTL(t, user, true)
}

func (b *bundle) checkLayoutTTL(t *testing.T, user int64, ttl bool) {
	t.Helper()
	ctx := context.Background()
	keys := feed.StorageKeys(b.prefix, user) // meta, head, tail
	meta, err := b.rdb.Get(ctx, keys[0]).Bytes()
	if err != nil {
		n, _ := b.rdb.Exists(ctx, keys[1], keys[2]).Result()
		require.Zero(t, n, "a head or a tail without its meta")
		return
	}
	require.Len(t, meta, 30)
	v, err := b.rdb.Get(ctx, keys[1]).Bytes()
	require.NoError(t, err, "a meta without its head")
	require.NotEmpty(t, v)
	require.Equal(t, byte(0xF2), v[0])
	require.Zero(t, (len(v)-1)%8)
	tailN := int(binary.BigEndian.Uint32(meta[18:22]))
	tailMax := int64(binary.BigEndian.Uint64(meta[22:30]))
	var recent []int64
	for p := 1; p < len(v); p += 8 {
		recent = append(recent, int64(binary.BigEndian.Uint64(v[p:])))
	}
	chunks, err := b.rdb.LRange(ctx, keys[2], 0, -1).Result()
	require.NoError(t, err)
	var tail []int64
	for _, c := range chunks {
		require.NotEmpty(t, c, "an empty chunk")
		require.Zero(t, len(c)%8)
		for p := 0; p < len(c); p += 8 {
			tail = append(tail, int64(binary.BigEndian.Uint64([]byte(c[p:]))))
		}
	}
	for i := 1; i < len(tail); i++ {
		require.Less(t, tail[i-1], tail[i], "tail ascending: %v", tail)
	}
	require.Equal(t, len(tail), tailN, "tailN")
	if len(tail) == 0 {
		require.Zero(t, tailMax, "tailMax of an empty tail")
	} else {
		require.Equal(t, tail[len(tail)-1], tailMax, "tailMax")
		require.NotEmpty(t, recent, "an empty head with a tail")
		for _, id := range recent {
			require.Less(t, tailMax, id, "a head entry not newer than the tail: %v", recent)
		}
	}
	if !ttl {
		return
	}
	metaTTL, err := b.rdb.PTTL(ctx, keys[0]).Result()
	require.NoError(t, err)
	for _, k := range keys[1:] {
		if n, _ := b.rdb.Exists(ctx, k).Result(); n == 0 {
			continue
		}
		kTTL, err := b.rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		if metaTTL > 0 {
			require.Greater(t, kTTL, time.Duration(0), "%s expires with the meta (meta %v, %s %v)", k, metaTTL, k, kTTL)
		}
	}
}

// truth is the ids of posts, newest first.
func newestFirst(ids ...int64) []int64 { return reversed(ids) }

// A remove that takes the head's only entry pulls the tail's newest into the
// head: when the tail is one chunk, RPOP deletes the list and the RPUSH of
// what is left of it makes a new key without a time to live.
func TestLayoutRemoveHeadOnlyEntryKeepsTailTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	p1, p2, p3 := b.post(t, 1), b.post(t, 1), b.post(t, 1)
	require.Equal(t, newestFirst(p1, p2, p3), b.readAll(t, 10, 20)) // rebuilt: head [p3], tail [[p1 p2]]
	b.checkLayout(t, 10)
	require.NoError(t, b.db.DeletePost(ctx, p3, 1))
	require.NoError(t, b.feeds.Remove(ctx, []int64{10}, []int64{p3}))
	require.Equal(t, []int64{p1, p2}, b.stored(t, 10).IDs)
	b.checkLayout(t, 10)
}

// The layout promises that a head whose tail is gone (evicted, expired
// apart) reads as missing and is rebuilt. A remove that empties the head of
// such a set must not fail.
func TestLayoutRemoveWithLostTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	p1, p2, p3 := b.post(t, 1), b.post(t, 1), b.post(t, 1)
	require.Equal(t, newestFirst(p1, p2, p3), b.readAll(t, 10, 20))
	require.NoError(t, b.rdb.Del(ctx, feed.StorageKeys(b.prefix, 10)[2]).Err()) // the tail is lost
	require.NoError(t, b.feeds.Remove(ctx, []int64{10}, []int64{p3}), "remove from a feed whose tail is lost")
}

// A push that spills into a set whose tail is lost must not fail, and must
// not keep the post from the other feeds of the same page.
func TestLayoutPushSpillWithLostTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{MaxLen: 4}) // spillAt 1: every push spills
	b.follow(t, 10, 1)
	b.follow(t, 11, 1)
	require.Empty(t, b.readAll(t, 10, 20)) // whole, empty
	require.Empty(t, b.readAll(t, 11, 20))
	a, x, c, d, e := b.post(t, 1), b.post(t, 1), b.post(t, 1), b.post(t, 1), b.post(t, 1)
	for _, id := range []int64{a, c, d, e} {
		_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{10, 11}, b.now(t), true))
		require.NoError(t, err)
	}
	// x lands late, into the tail: 5 entries, one more than max_len (slack).
	_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: x, AuthorID: 1}, []int64{10, 11}, b.now(t), true))
	require.NoError(t, err)
	b.checkLayout(t, 10)
	require.NoError(t, b.rdb.Del(ctx, feed.StorageKeys(b.prefix, 10)[2]).Err()) // 10's tail is lost
	f := b.post(t, 1)
	_, err = pushCount(b.feeds.Push(ctx, domain.Entry{PostID: f, AuthorID: 1}, []int64{10, 11}, b.now(t), true))
	assert.NoError(t, err, "push into a feed whose tail is lost")
	require.True(t, b.stored(t, 11).Has(f), "the other reader of the page gained the post")
	require.Equal(t, newestFirst(a, x, c, d, e, f), b.readAll(t, 10, 20))
}

// A head lost apart from its meta (evicted, expired apart): the APPEND of a
// push would make a new head without the layout's first byte. The push
// drops the set instead — no key of it is left, without a time to live or
// otherwise — and the next read rebuilds it; the other feeds of the page
// gain the post.
func TestLayoutPushWithLostHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	b.follow(t, 11, 1)
	p1 := b.post(t, 1)
	require.Equal(t, []int64{p1}, b.readAll(t, 10, 20))
	require.Equal(t, []int64{p1}, b.readAll(t, 11, 20))
	require.NoError(t, b.rdb.Del(ctx, feed.StorageKeys(b.prefix, 10)[1]).Err()) // 10's head is lost
	require.False(t, b.stored(t, 10).Exists, "a set without its head reads as missing")

	p2 := b.post(t, 1)
	n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: p2, AuthorID: 1}, []int64{10, 11}, b.now(t), true))
	require.NoError(t, err)
	require.Equal(t, 1, n, "only 11's feed gained the post")
	left, err := b.rdb.Exists(ctx, feed.StorageKeys(b.prefix, 10)...).Result()
	require.NoError(t, err)
	require.Zero(t, left, "the set whose head was lost is dropped whole")
	require.Equal(t, []int64{p2, p1}, b.readAll(t, 11, 20))
	require.Equal(t, []int64{p2, p1}, b.readAll(t, 10, 20), "rebuilt by the read")
	b.checkLayout(t, 10)
}

// Out-of-order pushes: walking chunks back, below the oldest chunk of a
// whole set and of a prefix, duplicates into head and tail, far older than
// maxWalk chunks, and removes that empty chunks or take the tail's newest.
func TestLayoutOutOfOrderAndRemoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, maxLen := range []int{1, 2, 3, 4, 16, 40} {
		b := setup(t, feed.Config{MaxLen: maxLen})
		b.follow(t, 10, 1)
		require.Empty(t, b.readAll(t, 10, 20))
		var ids []int64
		for range 60 {
			ids = append(ids, b.post(t, 1))
		}
		push := func(id int64, first bool) {
			_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{10}, b.now(t), first))
			require.NoError(t, err)
			b.checkLayout(t, 10)
		}
		// every third post first, then the rest from the newest down, each
		// twice (the second a redelivery), and every fifth a third time as
		// a push that takes itself for a first one
		for i := 0; i < len(ids); i += 3 {
			push(ids[i], true)
		}
		for i := len(ids) - 1; i >= 0; i-- {
			push(ids[i], i%3 != 0)
			push(ids[i], false)
			if i%5 == 0 {
				push(ids[i], true)
			}
		}
		want := reversed(ids)
		require.Equal(t, want, b.readAll(t, 10, 7), "max_len %d", maxLen)
		s := b.stored(t, 10)
		require.True(t, s.Complete)
		// remove the newest entries one by one, and some from the tail
		dead := map[int64]bool{}
		for k := 0; k < 5; k++ {
			st := b.stored(t, 10).IDs
			if len(st) == 0 { // a prefix of nothing was dropped: the read rebuilds it
				b.readAll(t, 10, 7)
				st = b.stored(t, 10).IDs
			}
			gone := []int64{st[len(st)-1]}
			if len(st) > 3 {
				gone = append(gone, st[len(st)-3])
			}
			for _, g := range gone {
				require.NoError(t, b.db.DeletePost(ctx, g, 1))
				dead[g] = true
			}
			require.NoError(t, b.feeds.Remove(ctx, []int64{10}, gone))
			b.checkLayoutTTL(t, 10, false) // TTL: see TestLayoutRemoveHeadOnlyEntryKeepsTailTTL
		}
		var left []int64
		for _, id := range want {
			if !dead[id] {
				left = append(left, id)
			}
		}
		require.Equal(t, left, b.readAll(t, 10, 7), "max_len %d", maxLen)
	}
}

// A feed left by a version that kept feeds as sorted sets (the same key,
// another type) reads as missing: the first read rebuilds it in the new
// layout, and no write fails on it meanwhile.
func TestLayoutSortedSetFromAnOlderVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	b.follow(t, 10, 2)
	first, second := b.post(t, 1), b.post(t, 2)
	old := []redis.Z{{Score: 0, Member: "0"}, {Score: 0.5, Member: "w"}, {Score: float64(first), Member: first}}
	require.NoError(t, b.rdb.ZAdd(ctx, b.feedKey(10), old...).Err())

	n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: second, AuthorID: 2}, []int64{10}, b.now(t), true))
	require.NoError(t, err)
	require.Zero(t, n, "no push into a feed of another layout")
	require.NoError(t, b.feeds.Remove(ctx, []int64{10}, []int64{first}))
	_, err = applyFollowState(ctx, b.db, b.feeds, 10, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{second, first}, b.readAll(t, 10, 20), "rebuilt from PostgreSQL")
	stored := b.stored(t, 10)
	require.True(t, stored.Complete && stored.Whole)
	require.Equal(t, []int64{first, second}, stored.IDs)

	// The same for a write first: an unfollow drops the old key.
	require.NoError(t, b.rdb.Del(ctx, b.feedKey(10)).Err())
	require.NoError(t, b.rdb.ZAdd(ctx, b.feedKey(10), old...).Err())
	_, err = b.db.Unfollow(ctx, 10, 2)
	require.NoError(t, err)
	require.NoError(t, applyUnfollowState(ctx, b.db, b.feeds, 10, 2))
	require.Equal(t, []int64{first}, b.readAll(t, 10, 20))
}

// A feed left by the version before the meta had a key of its own — header
// and entries in feed:{id}, beginning with 0xF1; with no entries it is 30
// bytes, a meta's length — reads as missing and is rebuilt, and a push
// writes nothing into it.
func TestLayoutTwoKeyFeedFromAnOlderVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	first := b.post(t, 1)
	old := make([]byte, 30)
	old[0], old[1] = 0xF1, 1|2 // complete and whole, no entry: an empty feed to that version
	require.NoError(t, b.rdb.Set(ctx, b.feedKey(10), old, time.Hour).Err())
	second := b.post(t, 1)
	n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: second, AuthorID: 1}, []int64{10}, b.now(t), true))
	require.NoError(t, err)
	require.Zero(t, n, "no push into a feed of another layout")
	require.Equal(t, []int64{second, first}, b.readAll(t, 10, 20), "rebuilt from PostgreSQL")
	b.checkLayout(t, 10)
}
