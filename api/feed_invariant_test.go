package api_test

import (
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// The two sequences a review found through the public API alone: each broke
// the feed's invariant in the default configuration. They run the whole
// product (API, dispatcher, queue, worker) on the real servers.

func newPipeline(t *testing.T, cfg modelConfig) *pipeline {
	t.Helper()
	rdb, prefix, cluster := testenv.NewUniversalRedis(t)
	return startPipeline(t, testenv.NewPool(t), rdb, cluster, prefix, cfg)
}

func (m *pipeline) follow(t *testing.T, follower, followee int64) {
	t.Helper()
	m.expect(t, m.call(t, follower, http.MethodPut, "/v1/following/"+strconv.FormatInt(followee, 10)), http.StatusNoContent)
	m.deliver(t)
}

func (m *pipeline) unfollow(t *testing.T, follower, followee int64) {
	t.Helper()
	m.expect(t, m.call(t, follower, http.MethodDelete, "/v1/following/"+strconv.FormatInt(followee, 10)), http.StatusNoContent)
	m.deliver(t)
}

func (m *pipeline) posts(t *testing.T, author int64, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = m.post(t, author)
	}
	m.deliver(t)
	return ids
}

// An unfollow removes every post of the followee, also those a feed holds in
// its trim slack (a full feed is trimmed back only once it holds max_len +
// max_len/16 entries).
func TestUnfollowInTrimSlack(t *testing.T) {
	t.Parallel()
	const reader, a, b = 1, 2, 3
	m := newPipeline(t, modelConfig{MaxLen: 160, Backfill: 50, ChunkSize: 5000, PageSize: 1000})
	m.follow(t, reader, a)
	m.follow(t, reader, b)
	bPost := m.posts(t, b, 1)
	require.Equal(t, bPost, m.readFrom(t, reader, 100, "", 0), "the first read builds the feed")
	m.posts(t, a, 175)
	m.unfollow(t, reader, a)
	require.Equal(t, bPost, m.readFrom(t, reader, 100, "", 0), "none of A's posts stays after the unfollow")
}

// A feed that an unfollow leaves without posts is no complete prefix of
// anything: a later follow must not treat it as one and hide the posts of
// the other followees.
func TestFollowAfterUnfollowEmptiedFeed(t *testing.T) {
	t.Parallel()
	const reader, a, b, c = 1, 2, 3, 4
	m := newPipeline(t, modelConfig{MaxLen: 4, Backfill: 2, ChunkSize: 5000, PageSize: 1000})
	cPosts := m.posts(t, c, 3)
	bPosts := m.posts(t, b, 1)
	m.posts(t, a, 6)
	m.follow(t, reader, a)
	m.follow(t, reader, b)
	m.readFrom(t, reader, 20, "", 0)
	m.unfollow(t, reader, a)
	m.follow(t, reader, c)
	want := slices.Concat(bPosts, cPosts)
	slices.Reverse(want[1:]) // newest first: B's post, then C's
	require.Equal(t, want, m.readFrom(t, reader, 20, "", 0), "B's post and C's three")
}
