package store_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
)

func TestCreateRepost(t *testing.T) {
	t.Parallel()
	db, bundle := setup(t)
	ctx := t.Context()
	const author, reposter = 1, 2
	original := createPosts(t, db, author, 1)[0]

	repost, created, err := db.CreateRepost(ctx, reposter, original.ID)
	require.NoError(t, err)
	require.True(t, created)
	require.Greater(t, repost.ID, original.ID, "a repost takes its id from the posts' sequence")
	require.Equal(t, int64(reposter), repost.AuthorID)
	require.Empty(t, repost.Body)
	require.NotNil(t, repost.RepostOf)
	require.Equal(t, original.ID, repost.RepostOf.ID)
	require.Equal(t, original.Body, repost.RepostOf.Body)

	again, created, err := db.CreateRepost(ctx, reposter, original.ID)
	require.NoError(t, err)
	require.False(t, created, "a second repost creates nothing")
	require.Equal(t, repost.ID, again.ID)
	require.Len(t, outboxRowsOfType(t, bundle.pool, domain.PostCreated), 2, "the post and one repost")

	_, _, err = db.CreateRepost(ctx, author, original.ID)
	require.ErrorIs(t, err, domain.ErrOwnPost)
	again, created, err = db.CreateRepost(ctx, reposter, repost.ID)
	require.NoError(t, err)
	require.False(t, created, "reposting one's repost is reposting its original again")
	require.Equal(t, repost.ID, again.ID)
	other, created, err := db.CreateRepost(ctx, 4, repost.ID)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, original.ID, other.RepostOf.ID, "a repost of a repost reposts the original")
	require.NoError(t, db.DeletePost(ctx, other.ID, 4))
	_, _, err = db.CreateRepost(ctx, 5, other.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "a deleted repost is not there to repost, though its original is")
	_, _, err = db.CreateRepost(ctx, reposter, 999999)
	require.ErrorIs(t, err, domain.ErrNotFound)

	_, err = db.Block(ctx, author, 3)
	require.NoError(t, err)
	_, _, err = db.CreateRepost(ctx, 3, original.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "a block hides the original")
	_, err = db.Mute(ctx, 6, author)
	require.NoError(t, err)
	_, _, err = db.CreateRepost(ctx, 6, original.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "so does a mute of its author")
	_, err = db.Block(ctx, reposter, 7)
	require.NoError(t, err)
	_, _, err = db.CreateRepost(ctx, 7, repost.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "a block by the reposter hides the repost")
	_, err = db.Mute(ctx, author, reposter)
	require.NoError(t, err)
	_, _, err = db.CreateRepost(ctx, author, repost.ID)
	require.ErrorIs(t, err, domain.ErrNotFound, "a repost of one's own post by someone one mutes is not there")

	// Deleting the original deletes its reposts, each with its event.
	reposts, err := db.DeletePostAndReposts(ctx, original.ID, author)
	require.NoError(t, err)
	require.Equal(t, []int64{repost.ID}, reposts)
	_, err = db.Post(ctx, repost.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.Len(t, outboxRowsOfType(t, bundle.pool, domain.PostDeleted), 3, "4's repost, the original, its live repost")
	_, _, err = db.CreateRepost(ctx, reposter, original.ID)
	require.ErrorIs(t, err, domain.ErrNotFound)
}

func TestBlockRemovesFollowsBothWays(t *testing.T) {
	t.Parallel()
	db, bundle := setup(t)
	ctx := t.Context()
	const a, b = 10, 11
	for _, e := range [][2]int64{{a, b}, {b, a}} {
		_, err := db.Follow(ctx, e[0], e[1])
		require.NoError(t, err)
	}
	ch, err := db.Block(ctx, a, b)
	require.NoError(t, err)
	require.True(t, ch.Changed)
	require.Len(t, ch.Unfollow, 2)
	for _, u := range ch.Unfollow {
		require.False(t, u.Following)
		require.Positive(t, u.Version)
	}
	require.ElementsMatch(t, []domain.HideState{
		{Reader: a, Other: b, Hidden: true, Version: 2},
		{Reader: b, Other: a, Hidden: true, Version: 2},
	}, ch.Hides)
	for _, e := range [][2]int64{{a, b}, {b, a}} {
		st, err := db.FollowState(ctx, e[0], e[1])
		require.NoError(t, err)
		require.False(t, st.Following)
		_, err = db.Follow(ctx, e[0], e[1])
		require.ErrorIs(t, err, domain.ErrBlocked, "no follow either way while the block stands")
	}
	require.Len(t, outboxRowsOfType(t, bundle.pool, domain.FollowDeleted), 2)
	require.Len(t, outboxRowsOfType(t, bundle.pool, domain.RelationChanged), 1)
	n, err := db.FollowerCount(ctx, b)
	require.NoError(t, err)
	require.Zero(t, n)

	// Blocking twice changes nothing, and takes a version all the same.
	ch, err = db.Block(ctx, a, b)
	require.NoError(t, err)
	require.False(t, ch.Changed)
	blocks, err := db.Blocks(ctx, a, nil, 10)
	require.NoError(t, err)
	require.Len(t, blocks, 1)
	require.Equal(t, int64(b), blocks[0].UserID)

	ch, err = db.Unblock(ctx, a, b)
	require.NoError(t, err)
	require.True(t, ch.Changed)
	for _, st := range ch.Hides {
		require.False(t, st.Hidden)
	}
	st, err := db.FollowState(ctx, a, b)
	require.NoError(t, err)
	require.False(t, st.Following, "follows a block removed stay removed")
	_, err = db.Follow(ctx, b, a)
	require.NoError(t, err)

	_, err = db.Mute(ctx, a, a)
	require.ErrorIs(t, err, domain.ErrSelfRelation)
}

func TestMuteVersionsAndState(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := t.Context()
	const a, b = 20, 21
	ch, err := db.Mute(ctx, a, b)
	require.NoError(t, err)
	require.Equal(t, []domain.HideState{{Reader: a, Other: b, Hidden: true, Version: 1}}, ch.Hides)
	_, err = db.Block(ctx, b, a)
	require.NoError(t, err)
	ch, err = db.Unmute(ctx, a, b)
	require.NoError(t, err)
	require.Equal(t, []domain.HideState{{Reader: a, Other: b, Hidden: true, Version: 3}}, ch.Hides,
		"b's block still hides b from a")
	states, err := db.HideStates(ctx, a, b)
	require.NoError(t, err)
	require.Equal(t, []domain.HideState{{Reader: a, Other: b, Hidden: true, Version: 3}, {Reader: b, Other: a, Hidden: true, Version: 1}}, states)
	hidden, err := db.Hidden(ctx, a)
	require.NoError(t, err)
	require.Equal(t, []int64{b}, hidden)
	mutes, err := db.Mutes(ctx, a, nil, 10)
	require.NoError(t, err)
	require.Empty(t, mutes)
}

// TestFolloweePostsShowsEachOriginalOnce walks the contract's rules: the
// first visible entry of an original shows, and the next when it goes.
func TestFolloweePostsShowsEachOriginalOnce(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := t.Context()
	const reader, author, b, c, stranger = 30, 31, 32, 33, 34
	for _, f := range []int64{author, b, c} {
		_, err := db.Follow(ctx, reader, f)
		require.NoError(t, err)
	}
	p := createPosts(t, db, author, 1)[0]
	rb, _, err := db.CreateRepost(ctx, b, p.ID)
	require.NoError(t, err)
	rc, _, err := db.CreateRepost(ctx, c, p.ID)
	require.NoError(t, err)
	rs, _, err := db.CreateRepost(ctx, stranger, p.ID)
	require.NoError(t, err)
	own, _, err := db.CreateRepost(ctx, reader, p.ID)
	require.NoError(t, err)
	_ = rs

	feed := func() []int64 {
		t.Helper()
		posts, err := db.FolloweePosts(ctx, reader, math.MaxInt64, 50)
		require.NoError(t, err)
		return postIDs(posts)
	}
	repeats := func() (repeats, deleted map[int64]bool) {
		t.Helper()
		page := []int64{rb.ID, rc.ID, own.ID}
		repeats, deleted, err := db.Repeats(ctx, reader, nil, page, page)
		require.NoError(t, err)
		return repeats, deleted
	}
	require.Equal(t, []int64{p.ID}, feed(), "the original shows, once")
	repeated, deleted := repeats()
	require.Equal(t, map[int64]bool{rb.ID: true, rc.ID: true, own.ID: true}, repeated)
	require.Empty(t, deleted)

	_, err = db.Unfollow(ctx, reader, author)
	require.NoError(t, err)
	require.Equal(t, []int64{rb.ID}, feed(), "the first repost shows once the original's author is unfollowed")
	repeated, _ = repeats()
	require.Equal(t, map[int64]bool{rc.ID: true, own.ID: true}, repeated)

	_, err = db.Mute(ctx, reader, b)
	require.NoError(t, err)
	require.Equal(t, []int64{rc.ID}, feed(), "muting its author brings the next")

	require.NoError(t, db.DeletePost(ctx, rc.ID, c))
	require.Equal(t, []int64{own.ID}, feed(), "deleting it brings the next: the reader's own")
	repeated, deleted = repeats()
	require.Equal(t, map[int64]bool{own.ID: true}, repeated, "by the hides given (none), b's earlier repost shows")
	require.Equal(t, map[int64]bool{rc.ID: true}, deleted)

	_, err = db.Block(ctx, author, reader)
	require.NoError(t, err)
	require.Empty(t, feed(), "a block by the original's author hides every repost of it")

	_, err = db.Unblock(ctx, author, reader)
	require.NoError(t, err)
	_, err = db.Unmute(ctx, reader, b)
	require.NoError(t, err)
	require.Equal(t, []int64{rb.ID}, feed())
	entries, err := db.FeedEntries(ctx, reader, 50)
	require.NoError(t, err)
	require.Equal(t, []int64{own.ID, rb.ID}, postIDs(entries), "Redis holds the entries unfiltered")
}
