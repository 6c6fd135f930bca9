package api_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func postPath(id int64) string { return "/v1/posts/" + strconv.FormatInt(id, 10) }

func TestCreatePost(t *testing.T) {
	t.Parallel()

	t.Run("answers 201 with the post, written with its outbox event", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		start := time.Now()

		res := b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body": "Good morning"}`), as: 123})
		require.Equal(t, http.StatusCreated, res.status, "body: %s", res.body)
		requireJSON(t, res)
		var shape map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(res.body, &shape))
		require.Len(t, shape, 4, "a post is exactly id, author_id, body, created_at: %s", res.body)
		p := decodeStrict[apiPost](t, res.body)
		require.Positive(t, p.ID)
		require.Equal(t, int64(123), p.AuthorID)
		require.Equal(t, "Good morning", p.Body)
		created := requireRFC3339UTC(t, p.CreatedAt)
		require.WithinDuration(t, start, created, time.Minute)

		require.Equal(t, 1, b.count(t, "posts", ""))
		require.Equal(t, 1, b.count(t, "outbox", "event_type = 'post.created' AND (payload->>'post_id')::bigint = $1", p.ID))
		require.Equal(t, 1, b.count(t, "outbox", ""))
	})

	t.Run("GET answers the same post", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		p := b.createPost(t, 5, "hello, wörld 😀 \"quoted\" <b>")

		for _, reader := range []int64{5, 6} { // anyone may read it
			res := b.get(t, reader, postPath(p.ID))
			require.Equal(t, http.StatusOK, res.status, "body: %s", res.body)
			requireJSON(t, res)
			require.Equal(t, p, decodeStrict[apiPost](t, res.body))
		}
	})

	t.Run("a missing post is 404", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		requireError(t, b.get(t, 1, postPath(1)), http.StatusNotFound, "not_found")
		requireError(t, b.get(t, 1, postPath(9223372036854775807)), http.StatusNotFound, "not_found")
	})

	t.Run("posts of one author get increasing ids", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 3)
		require.Less(t, posts[0].ID, posts[1].ID)
		require.Less(t, posts[1].ID, posts[2].ID)
	})
}

func TestCreatePostIdempotency(t *testing.T) {
	t.Parallel()

	create := func(t *testing.T, b *testBundle, author int64, body, key string) response {
		t.Helper()
		raw, err := json.Marshal(map[string]string{"body": body})
		require.NoError(t, err)
		return b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: raw, as: author,
			header: map[string]string{"Idempotency-Key": key}})
	}

	t.Run("a repeat answers 200 with the first post and writes nothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)

		first := create(t, b, 1, "once", "key-1")
		require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)
		p := decodeStrict[apiPost](t, first.body)

		for _, body := range []string{"once", "a different body"} {
			again := create(t, b, 1, body, "key-1")
			require.Equal(t, http.StatusOK, again.status, "body: %s", again.body)
			requireJSON(t, again)
			require.Equal(t, p, decodeStrict[apiPost](t, again.body))
		}
		require.Equal(t, 1, b.count(t, "posts", ""))
		require.Equal(t, 1, b.count(t, "outbox", ""))
	})

	t.Run("keys are per author", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)

		r1 := create(t, b, 1, "by one", "shared")
		r2 := create(t, b, 2, "by two", "shared")
		require.Equal(t, http.StatusCreated, r1.status)
		require.Equal(t, http.StatusCreated, r2.status)
		require.NotEqual(t, decodeStrict[apiPost](t, r1.body).ID, decodeStrict[apiPost](t, r2.body).ID)
		require.Equal(t, 2, b.count(t, "posts", ""))
		require.Equal(t, 2, b.count(t, "outbox", ""))
	})

	t.Run("another key creates another post", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)

		require.Equal(t, http.StatusCreated, create(t, b, 1, "a", "k1").status)
		require.Equal(t, http.StatusCreated, create(t, b, 1, "a", "k2").status)
		require.Equal(t, 2, b.count(t, "posts", ""))
		require.Equal(t, 2, b.count(t, "outbox", ""))
	})

	t.Run("without a key every request creates a post", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)

		b.createPost(t, 1, "same")
		b.createPost(t, 1, "same")
		require.Equal(t, 2, b.count(t, "posts", ""))
		require.Equal(t, 2, b.count(t, "outbox", ""))
	})

	t.Run("concurrent repeats create one post", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)

		const n = 8
		results := make([]response, n)
		errs := make([]error, n)
		auth := "Bearer " + b.token(t, 1)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = b.tryDo(req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body": "race"}`),
					auth: auth, header: map[string]string{"Idempotency-Key": "race-key"}})
			})
		}
		close(start)
		wg.Wait()

		created := 0
		var ids []int64
		for i, r := range results {
			require.NoError(t, errs[i])
			require.Contains(t, []int{http.StatusCreated, http.StatusOK}, r.status, "body: %s", r.body)
			if r.status == http.StatusCreated {
				created++
			}
			ids = append(ids, decodeStrict[apiPost](t, r.body).ID)
		}
		require.Equal(t, 1, created)
		for _, id := range ids {
			require.Equal(t, ids[0], id)
		}
		require.Equal(t, 1, b.count(t, "posts", ""))
		require.Equal(t, 1, b.count(t, "outbox", ""))
	})
}

func TestDeletePost(t *testing.T) {
	t.Parallel()

	t.Run("by another user is 403 and changes nothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		p := b.createPost(t, 1, "mine")
		before := b.state(t)

		requireError(t, b.del(t, 2, postPath(p.ID)), http.StatusForbidden, "forbidden")
		require.Equal(t, before, b.state(t))
		require.Zero(t, b.count(t, "outbox", "event_type = 'post.deleted'"))
		res := b.get(t, 1, postPath(p.ID))
		require.Equal(t, http.StatusOK, res.status)
		require.Equal(t, p, decodeStrict[apiPost](t, res.body))
	})

	t.Run("by the author is 204, then the post is gone", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		p := b.createPost(t, 1, "regret")

		res := b.del(t, 1, postPath(p.ID))
		require.Equal(t, http.StatusNoContent, res.status, "body: %s", res.body)
		require.Empty(t, res.body)
		require.Equal(t, 1, b.count(t, "outbox", "event_type = 'post.deleted' AND (payload->>'post_id')::bigint = $1", p.ID))

		requireError(t, b.get(t, 1, postPath(p.ID)), http.StatusNotFound, "not_found")
		requireError(t, b.get(t, 2, postPath(p.ID)), http.StatusNotFound, "not_found")
		// Deleting again, by anyone, finds nothing and writes nothing.
		before := b.state(t)
		requireError(t, b.del(t, 1, postPath(p.ID)), http.StatusNotFound, "not_found")
		requireError(t, b.del(t, 2, postPath(p.ID)), http.StatusNotFound, "not_found")
		require.Equal(t, before, b.state(t))
	})

	t.Run("a missing post is 404", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		requireError(t, b.del(t, 1, postPath(77)), http.StatusNotFound, "not_found")
		require.Equal(t, state{}, b.state(t))
	})

	t.Run("it leaves the author's listing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 3)
		require.Equal(t, http.StatusNoContent, b.del(t, 1, postPath(posts[1].ID)).status)

		p := page[apiPost](t, b, 1, "/v1/users/1/posts?limit=10")
		require.Equal(t, []int64{posts[2].ID, posts[0].ID}, postIDs(p.Items))
	})
}

func TestUserPosts(t *testing.T) {
	t.Parallel()

	t.Run("none", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		res := b.get(t, 1, "/v1/users/1/posts")
		require.Equal(t, http.StatusOK, res.status)
		require.JSONEq(t, `{"items": [], "next_cursor": null}`, string(res.body))
	})

	t.Run("newest first, paged without gaps or repeats", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 7, 5)
		b.createPosts(t, 8, 2) // another author's posts are not listed

		for _, limit := range []int{1, 2, 3, 4, 5, 6, 100} {
			pages := allPages[apiPost](t, b, 1, "/v1/users/7/posts?limit="+strconv.Itoa(limit))
			wantPages := (5 + limit - 1) / limit
			require.Len(t, pages, wantPages, "limit %d", limit)
			for i, p := range pages {
				if i < len(pages)-1 {
					require.Len(t, p, limit)
				}
			}
			got := flatten(pages)
			require.Equal(t, newestFirst(posts), postIDs(got), "limit %d", limit)
			for _, p := range got {
				require.Equal(t, int64(7), p.AuthorID)
				requireRFC3339UTC(t, p.CreatedAt)
			}
		}
	})

	t.Run("default limit is 20", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 21)

		first := page[apiPost](t, b, 2, "/v1/users/1/posts")
		require.Len(t, first.Items, 20)
		require.NotNil(t, first.NextCursor)
		last := page[apiPost](t, b, 2, "/v1/users/1/posts?cursor="+*first.NextCursor)
		require.Equal(t, []int64{posts[0].ID}, postIDs(last.Items))
		require.Nil(t, last.NextCursor)
	})

	t.Run("the cursor is stable across new posts", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 5)

		p1 := page[apiPost](t, b, 2, "/v1/users/1/posts?limit=2")
		require.Equal(t, newestFirst(posts)[:2], postIDs(p1.Items))
		b.createPosts(t, 1, 2)
		p2 := page[apiPost](t, b, 2, "/v1/users/1/posts?limit=2&cursor="+*p1.NextCursor)
		require.Equal(t, newestFirst(posts)[2:4], postIDs(p2.Items))
		b.createPosts(t, 1, 1)
		p3 := page[apiPost](t, b, 2, "/v1/users/1/posts?limit=2&cursor="+*p2.NextCursor)
		require.Equal(t, newestFirst(posts)[4:], postIDs(p3.Items))
		require.Nil(t, p3.NextCursor)
	})
}
