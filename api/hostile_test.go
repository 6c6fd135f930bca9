package api_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A query string that does not parse, or that repeats limit or cursor, is
// the client's mistake: 400 invalid_argument, not a page that silently
// ignores it.
func TestHostileQueryStrings(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.follow(t, 1, 2)
	b.createPost(t, 2, "hello")
	for _, path := range []string{
		"/v1/feed?cursor=%%%garbage",
		"/v1/feed?limit=%zz",
		"/v1/feed?limit=1&limit=2",
		"/v1/feed?cursor=a&cursor=b",
		"/v1/users/2/posts?limit=2;limit=3",
		"/v1/users/2/followers?limit=1&limit=1",
		"/v1/users/1/following?cursor=%",
	} {
		requireError(t, b.get(t, 1, path), http.StatusBadRequest, "invalid_argument")
	}
	require.Equal(t, http.StatusOK, b.get(t, 1, "/v1/feed?limit=5&other=1&other=2").status, "other parameters may repeat")
	res := b.do(t, req{method: http.MethodGet, path: "/v1/feed?cursor=%%%garbage", auth: "Bearer nope"})
	requireError(t, res, http.StatusUnauthorized, "unauthenticated") // authentication comes first
}

// A body over 64 KiB is refused on every route, read or not, sent with a
// length or chunked, and writes nothing.
func TestOversizedBodiesOnEveryRoute(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	p := b.createPost(t, 1, "mine")
	big := bytes.Repeat([]byte("x"), 100<<10)
	for _, r := range []req{
		{method: http.MethodPut, path: "/v1/following/2"},
		{method: http.MethodDelete, path: "/v1/following/2"},
		{method: http.MethodDelete, path: postPath(p.ID)},
		{method: http.MethodGet, path: "/v1/feed"},
		{method: http.MethodGet, path: postPath(p.ID)},
		{method: http.MethodPost, path: "/v1/posts"},
	} {
		for _, chunked := range []bool{false, true} {
			r.body, r.stream, r.as = big, chunked, 1
			requireError(t, b.do(t, r), http.StatusRequestEntityTooLarge, "too_large")
		}
	}
	require.Zero(t, b.count(t, "follows", "true"))
	require.Equal(t, 1, b.count(t, "posts", "deleted_at IS NULL"), "the post is still there, and no other")
	// A small body sent chunked is read as usual.
	res := b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body": "chunked"}`), stream: true, as: 1})
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
}

// A path below a route that ends in an id is no route, whatever the method
// and however the id looks: 404, and nothing is written. (echo would give
// the id the rest of the path, and a wrong method there answered 405.)
func TestPathsBelowARouteAreNoRoutes(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	p := b.createPost(t, 1, "mine")
	for _, r := range []req{
		{method: http.MethodPut, path: "/v1/following/2/3"},
		{method: http.MethodPut, path: "/v1/following/2/"},
		{method: http.MethodDelete, path: "/v1/following/2/x"},
		{method: http.MethodPost, path: "/v1/following/0/"},
		{method: http.MethodPost, path: "/v1/following//"},
		{method: http.MethodGet, path: postPath(p.ID) + "/"},
		{method: http.MethodDelete, path: postPath(p.ID) + "/1"},
		{method: http.MethodPatch, path: postPath(p.ID) + "/1"},
	} {
		r.as = 1
		requireError(t, b.do(t, r), http.StatusNotFound, "not_found")
	}
	require.Equal(t, http.StatusOK, b.get(t, 1, postPath(p.ID)).status, "the post is still there")
	require.Zero(t, b.count(t, "follows", "true"), "no follow was written")
}
