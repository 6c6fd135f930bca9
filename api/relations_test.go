package api_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// repostJSON is the whole JSON shape of a repost: no body, the original inside.
type repostJSON struct {
	ID        int64   `json:"id"`
	AuthorID  int64   `json:"author_id"`
	CreatedAt string  `json:"created_at"`
	RepostOf  apiPost `json:"repost_of"`
}

func (b *testBundle) repost(t *testing.T, as, postID int64) response {
	t.Helper()
	return b.do(t, req{method: http.MethodPost, path: "/v1/posts/" + strconv.FormatInt(postID, 10) + "/reposts", as: as})
}

func TestRepost(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	original := b.createPost(t, 1, "worth repeating")

	res := b.repost(t, 2, original.ID)
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	r := decodeStrict[repostJSON](t, res.body)
	require.Equal(t, "/v1/posts/"+strconv.FormatInt(r.ID, 10), res.header.Get("Location"))
	require.Greater(t, r.ID, original.ID)
	require.Equal(t, int64(2), r.AuthorID)
	require.Equal(t, original, r.RepostOf)
	requireRFC3339UTC(t, r.CreatedAt)
	require.Equal(t, []int64{r.ID}, readFeed(t, b, 2, 20), "the reposter's own feed holds it from the 201 on")

	again := b.repost(t, 2, original.ID)
	require.Equal(t, http.StatusOK, again.status)
	require.Equal(t, r.ID, decodeStrict[repostJSON](t, again.body).ID, "a second repost answers the first")
	viaRepost := b.repost(t, 3, r.ID)
	require.Equal(t, http.StatusCreated, viaRepost.status)
	require.Equal(t, original.ID, decodeStrict[repostJSON](t, viaRepost.body).RepostOf.ID, "reposting a repost reposts its original")

	requireError(t, b.repost(t, 1, original.ID), http.StatusUnprocessableEntity, "invalid_argument")
	requireError(t, b.repost(t, 1, r.ID), http.StatusUnprocessableEntity, "invalid_argument")
	requireError(t, b.repost(t, 2, 999999), http.StatusNotFound, "not_found")
	require.Equal(t, http.StatusNoContent, b.put(t, 4, "/v1/mutes/1").status)
	requireError(t, b.repost(t, 4, original.ID), http.StatusNotFound, "not_found") // hidden from the caller
	require.Equal(t, http.StatusNoContent, b.put(t, 1, "/v1/blocks/5").status)
	requireError(t, b.repost(t, 5, original.ID), http.StatusNotFound, "not_found")
	requireError(t, b.repost(t, 5, r.ID), http.StatusNotFound, "not_found")

	// Deleting the original deletes its reposts.
	require.Equal(t, http.StatusNoContent, b.del(t, 1, "/v1/posts/"+strconv.FormatInt(original.ID, 10)).status)
	requireError(t, b.get(t, 2, "/v1/posts/"+strconv.FormatInt(r.ID, 10)), http.StatusNotFound, "not_found")
	require.Empty(t, readFeed(t, b, 2, 20))
}

func TestMutesAndBlocks(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	post := b.createPost(t, 1, "by one")
	postPath := "/v1/posts/" + strconv.FormatInt(post.ID, 10)

	requireError(t, b.put(t, 2, "/v1/mutes/2"), http.StatusUnprocessableEntity, "invalid_argument")
	requireError(t, b.put(t, 2, "/v1/blocks/2"), http.StatusUnprocessableEntity, "invalid_argument")
	for range 2 { // idempotent
		require.Equal(t, http.StatusNoContent, b.put(t, 2, "/v1/mutes/1").status)
	}
	mutes := page[apiFollow](t, b, 2, "/v1/mutes")
	require.Equal(t, []int64{1}, followIDs(mutes.Items))
	require.Empty(t, page[apiFollow](t, b, 1, "/v1/mutes").Items, "one's own mutes only")
	require.Equal(t, http.StatusOK, b.get(t, 2, postPath).status, "a mute hides from the feed, not the post")
	require.Equal(t, http.StatusNoContent, b.del(t, 2, "/v1/mutes/1").status)
	require.Empty(t, page[apiFollow](t, b, 2, "/v1/mutes").Items)

	b.follow(t, 2, 1)
	b.follow(t, 1, 2)
	require.Equal(t, []int64{post.ID}, readFeed(t, b, 2, 20))
	require.Equal(t, http.StatusNoContent, b.put(t, 1, "/v1/blocks/2").status)
	require.Equal(t, []int64{2}, followIDs(page[apiFollow](t, b, 1, "/v1/blocks").Items))
	require.Empty(t, page[apiFollow](t, b, 1, followingPath(1)).Items, "the block removed the follows both ways")
	require.Empty(t, page[apiFollow](t, b, 2, followingPath(2)).Items)
	require.Empty(t, readFeed(t, b, 2, 20), "nothing of the blocker")
	requireError(t, b.put(t, 2, "/v1/following/1"), http.StatusForbidden, "forbidden")
	requireError(t, b.put(t, 1, "/v1/following/2"), http.StatusForbidden, "forbidden")
	requireError(t, b.get(t, 2, postPath), http.StatusNotFound, "not_found")
	requireError(t, b.get(t, 2, "/v1/users/1/posts"), http.StatusNotFound, "not_found")
	requireError(t, b.get(t, 1, "/v1/users/2/posts"), http.StatusNotFound, "not_found")
	require.Equal(t, http.StatusOK, b.get(t, 3, postPath).status, "others still see it")

	require.Equal(t, http.StatusNoContent, b.del(t, 1, "/v1/blocks/2").status)
	require.Empty(t, readFeed(t, b, 2, 20), "follows removed by the block stay removed")
	require.Equal(t, http.StatusOK, b.get(t, 2, postPath).status)
	b.follow(t, 2, 1)
	require.Equal(t, []int64{post.ID}, readFeed(t, b, 2, 20))
}
