package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/openapitest"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// The tests run servers, streams with their timers, live hubs and
// publishers, dispatchers and workers behind the API, and feeds that
// rebuild in goroutines; none of their goroutines may outlive the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakOptions()...)
}

var testSecret = []byte("test-secret")

// testBundle is everything a test of the API needs: the real store on its own
// PostgreSQL database, real feeds under its own Redis prefix, and the API
// served over HTTP.
type testBundle struct {
	pool   *pgxpool.Pool
	db     *store.DB
	rdb    redis.UniversalClient // the Redis Cluster in the cluster pass (NEWSFEED_TEST_REDIS_CLUSTER_URL)
	prefix string
	feeds  *feed.Feeds
	srv    *httptest.Server
	secret []byte
}

type setupOpts struct {
	// feedMaxLen overrides feed.Config.MaxLen when positive.
	feedMaxLen int
	// configure, if set, changes the API's configuration before it is built.
	configure func(*api.Config)
}

// newFeeds is feed.New for a configuration that is valid.
func newFeeds(t tb, rdb redis.UniversalClient, st feed.Store, cfg feed.Config) *feed.Feeds {
	t.Helper()
	f, err := feed.New(rdb, st, cfg)
	if err != nil {
		t.Fatalf("feed.New: %v", err)
	}
	return f
}

// newAPI is api.New for a configuration that is valid.
func newAPI(t tb, posts api.Posts, graph api.Graph, feeds api.Feeds, cfg api.Config) *echo.Echo {
	t.Helper()
	e, err := api.New(posts, graph, feeds, cfg)
	if err != nil {
		t.Fatalf("api.New: %v", err)
	}
	return e
}

func setup(t *testing.T) (*echo.Echo, *testBundle) {
	t.Helper()
	return setupWith(t, setupOpts{})
}

func setupWith(t *testing.T, opts setupOpts) (*echo.Echo, *testBundle) {
	t.Helper()
	pool := testenv.NewPool(t)
	db := store.New(pool, nil)
	rdb, prefix, cluster := testenv.NewUniversalRedis(t)
	feeds := newFeeds(t, rdb, db, feed.Config{Prefix: prefix, Backfill: 50, MaxLen: opts.feedMaxLen, Cluster: cluster})
	cfg := api.Config{Secret: testSecret}
	if opts.configure != nil {
		opts.configure(&cfg)
	}
	e := newAPI(t, db, db, feeds, cfg)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return e, &testBundle{pool: pool, db: db, rdb: rdb, prefix: prefix, feeds: feeds, srv: srv, secret: testSecret}
}

// token returns a valid bearer token for userID.
func (b *testBundle) token(t *testing.T, userID int64) string {
	t.Helper()
	tok, err := api.IssueToken(b.secret, userID, time.Hour)
	require.NoError(t, err)
	return tok
}

// response is what a request got back.
type response struct {
	status int
	header http.Header
	body   []byte
}

// req describes one request. as is the user the request is made by (0: no
// Authorization header unless auth is set); auth, when set, is sent verbatim
// as the Authorization header.
type req struct {
	method string
	path   string
	body   []byte
	// stream sends the body without a Content-Length (chunked).
	stream bool
	as     int64
	auth   string
	header map[string]string
}

func (b *testBundle) do(t *testing.T, r req) response {
	t.Helper()
	if r.auth == "" && r.as != 0 {
		r.auth = "Bearer " + b.token(t, r.as)
	}
	res, err := b.tryDo(r)
	require.NoError(t, err)
	return res
}

// tryDo is do for goroutines other than the test's: it reports errors
// instead of failing the test. It does not sign tokens: set r.auth. Every
// exchange is checked against docs/openapi.yaml: an answer the description
// does not allow is an error that says what drifted.
func (b *testBundle) tryDo(r req) (response, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
		if r.stream {
			body = io.MultiReader(body) // hides the length: sent chunked
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, r.method, b.srv.URL+r.path, body)
	if err != nil {
		return response{}, err
	}
	if r.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.auth != "" {
		hr.Header.Set("Authorization", r.auth)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	res, err := b.srv.Client().Do(hr)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	out := response{status: res.StatusCode, header: res.Header, body: raw}
	return out, checkSpec(hr, r.body, out)
}

// checkSpec checks one exchange against docs/openapi.yaml.
func checkSpec(hr *http.Request, body []byte, res response) error {
	spec, err := openapitest.Load()
	if err != nil {
		return err
	}
	return spec.Check(openapitest.Exchange{Request: hr, RequestBody: body, Status: res.status, Header: res.header, Body: res.body})
}

// get, post, put and del are shorthands for requests made by user as.
func (b *testBundle) get(t *testing.T, as int64, path string) response {
	t.Helper()
	return b.do(t, req{method: http.MethodGet, path: path, as: as})
}

func (b *testBundle) put(t *testing.T, as int64, path string) response {
	t.Helper()
	return b.do(t, req{method: http.MethodPut, path: path, as: as})
}

func (b *testBundle) del(t *testing.T, as int64, path string) response {
	t.Helper()
	return b.do(t, req{method: http.MethodDelete, path: path, as: as})
}

// apiPost is the JSON shape of a post.
type apiPost struct {
	ID        int64    `json:"id"`
	AuthorID  int64    `json:"author_id"`
	Body      string   `json:"body,omitempty"`
	CreatedAt string   `json:"created_at"`
	RepostOf  *apiPost `json:"repost_of,omitempty"` // a repost's original
}

// apiFollow is the JSON shape of a follow listing item.
type apiFollow struct {
	UserID int64  `json:"user_id"`
	Since  string `json:"since"`
}

type apiPage[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// createPost posts body as author and requires 201.
func (b *testBundle) createPost(t *testing.T, author int64, body string) apiPost {
	t.Helper()
	raw, err := json.Marshal(map[string]string{"body": body})
	require.NoError(t, err)
	res := b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: raw, as: author})
	require.Equal(t, http.StatusCreated, res.status, "create post: %s", res.body)
	return decodeStrict[apiPost](t, res.body)
}

// createPosts creates n posts by author and returns them oldest first.
func (b *testBundle) createPosts(t *testing.T, author int64, n int) []apiPost {
	t.Helper()
	posts := make([]apiPost, n)
	for i := range n {
		posts[i] = b.createPost(t, author, "post "+strconv.Itoa(i)+" by "+strconv.FormatInt(author, 10))
	}
	return posts
}

// follow makes follower follow followee and requires 204.
func (b *testBundle) follow(t *testing.T, follower, followee int64) {
	t.Helper()
	res := b.put(t, follower, "/v1/following/"+strconv.FormatInt(followee, 10))
	require.Equal(t, http.StatusNoContent, res.status, "follow: %s", res.body)
	require.Empty(t, res.body)
}

// unfollow requires 204.
func (b *testBundle) unfollow(t *testing.T, follower, followee int64) {
	t.Helper()
	res := b.del(t, follower, "/v1/following/"+strconv.FormatInt(followee, 10))
	require.Equal(t, http.StatusNoContent, res.status, "unfollow: %s", res.body)
	require.Empty(t, res.body)
}

// page reads one page of a listing of T and requires 200.
func page[T any](t *testing.T, b *testBundle, as int64, path string) apiPage[T] {
	t.Helper()
	res := b.get(t, as, path)
	require.Equal(t, http.StatusOK, res.status, "GET %s: %s", path, res.body)
	requireJSON(t, res)
	// items must be an array (never null) and next_cursor present.
	var shape map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(res.body, &shape))
	require.Len(t, shape, 2, "a page has exactly items and next_cursor: %s", res.body)
	require.Contains(t, shape, "next_cursor")
	require.True(t, bytes.HasPrefix(bytes.TrimSpace(shape["items"]), []byte("[")), "items is an array: %s", res.body)
	p := decodeStrict[apiPage[T]](t, res.body)
	if p.NextCursor != nil {
		require.NotEmpty(t, *p.NextCursor, "a next_cursor is null or a non-empty string")
	}
	return p
}

// allPages follows next_cursor from path (which must have a query string)
// until the last page and returns every page.
func allPages[T any](t *testing.T, b *testBundle, as int64, path string) [][]T {
	t.Helper()
	var pages [][]T
	p := page[T](t, b, as, path)
	pages = append(pages, p.Items)
	for p.NextCursor != nil {
		require.Less(t, len(pages), 1000, "paging does not end")
		p = page[T](t, b, as, path+"&cursor="+*p.NextCursor)
		pages = append(pages, p.Items)
	}
	return pages
}

func flatten[T any](pages [][]T) []T {
	var out []T
	for _, p := range pages {
		out = append(out, p...)
	}
	return out
}

func postIDs(posts []apiPost) []int64 {
	ids := make([]int64, len(posts))
	for i, p := range posts {
		ids[i] = p.ID
	}
	return ids
}

func followIDs(follows []apiFollow) []int64 {
	ids := make([]int64, len(follows))
	for i, f := range follows {
		ids[i] = f.UserID
	}
	return ids
}

// newestFirst returns the ids of posts (given oldest first) newest first.
func newestFirst(posts []apiPost) []int64 {
	ids := postIDs(posts)
	for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
	}
	return ids
}

// decodeStrict decodes raw into T, refusing fields T does not know.
func decodeStrict[T any](t *testing.T, raw []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v), "decode %s", raw)
	return v
}

func requireJSON(t *testing.T, res response) {
	t.Helper()
	require.True(t, strings.HasPrefix(res.header.Get("Content-Type"), "application/json"),
		"Content-Type %q", res.header.Get("Content-Type"))
}

// requireError requires the status and exactly the body
// {"error": {"code": code, "message": "<non-empty>"}}.
func requireError(t *testing.T, res response, status int, code string) {
	t.Helper()
	require.Equal(t, status, res.status, "body: %s", res.body)
	require.Equal(t, code, errorCode(t, res), "body: %s", res.body)
}

// errorCode checks the error body shape and returns its code.
func errorCode(t *testing.T, res response) string {
	t.Helper()
	requireJSON(t, res)
	var outer map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(res.body, &outer), "error body is a JSON object: %s", res.body)
	require.Len(t, outer, 1, "error body has only \"error\": %s", res.body)
	require.Contains(t, outer, "error")
	var inner map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(outer["error"], &inner), "error is an object: %s", res.body)
	require.Len(t, inner, 2, "error has exactly code and message: %s", res.body)
	var code, message string
	require.NoError(t, json.Unmarshal(inner["code"], &code), "code is a string: %s", res.body)
	require.NoError(t, json.Unmarshal(inner["message"], &message), "message is a string: %s", res.body)
	require.Regexp(t, `^[a-z]+(_[a-z]+)*$`, code)
	require.NotEmpty(t, strings.TrimSpace(message))
	require.NotContains(t, message, "goroutine")
	require.NotContains(t, message, ".go:")
	return code
}

// count returns the rows of a table matching an optional condition.
func (b *testBundle) count(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	sql := "SELECT count(*) FROM " + table
	if where != "" {
		sql += " WHERE " + where
	}
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// state is what bad input must not change.
type state struct{ posts, outbox, follows int }

func (b *testBundle) state(t *testing.T) state {
	t.Helper()
	return state{posts: b.count(t, "posts", ""), outbox: b.count(t, "outbox", ""), follows: b.count(t, "follows", "")}
}

// requireRFC3339UTC requires an RFC 3339 time in UTC and returns it.
func requireRFC3339UTC(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err, "RFC 3339: %q", s)
	require.True(t, strings.HasSuffix(s, "Z"), "UTC: %q", s)
	return ts
}

func TestUnknownRoute(t *testing.T) {
	t.Parallel()
	_, b := setup(t)

	for _, tc := range []struct {
		name, method, path string
	}{
		{"outside /v1", http.MethodGet, "/nope"},
		{"the prefix alone", http.MethodGet, "/v1"}, // "/" is the web app's page (webapp_test.go)
		{"under /v1", http.MethodGet, "/v1/nope"},
		{"deeper than a route", http.MethodGet, "/v1/posts/1/comments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := b.do(t, req{method: tc.method, path: tc.path, as: 1})
			requireError(t, res, http.StatusNotFound, "not_found")
		})
	}
}

func TestWrongMethod(t *testing.T) {
	t.Parallel()
	_, b := setup(t)

	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/posts"},
		{http.MethodPut, "/v1/posts"},
		{http.MethodPatch, "/v1/posts/1"},
		{http.MethodPost, "/v1/posts/1"},
		{http.MethodGet, "/v1/following/2"},
		{http.MethodPost, "/v1/feed"},
		{http.MethodDelete, "/v1/users/1/posts"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			before := b.state(t)
			res := b.do(t, req{method: tc.method, path: tc.path, as: 1, body: []byte(`{"body":"x"}`)})
			requireError(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
			require.Equal(t, before, b.state(t))
		})
	}
}
