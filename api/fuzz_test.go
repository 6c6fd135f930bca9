package api

// Native Go fuzz targets (issue 9). The HTTP targets fuzz the whole path of a
// request: net/http's parsing (fuzzEnv.serve), the echo router, every
// middleware and the handler, against a real PostgreSQL database and Redis
// prefix built once per target. Each input asserts what the contract
// promises of any input: no panic, never a 5xx, an error body of exactly
// {"error": {"code": "snake_case", "message": "…"}}, nothing written by a
// rejected request, and the answer a reference oracle (fuzz_helpers_test.go)
// derives from the contract. The pure targets fuzz the decoders directly,
// far faster.
//
// Seeds are in testdata/fuzz/FuzzXxx; `go test ./api/` runs them as tests.
// Fuzz one target with
//
//	go test -run '^$' -fuzz '^FuzzCreatePost$' -fuzztime 30s ./api/
//
// or every target of the repository with scripts/fuzz.sh 10s. A failure
// leaves its input in testdata/fuzz/FuzzXxx/<hash>: commit it only as a
// deliberate seed, with the fix.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/newsfeed/newsfeed/domain"
)

// fuzzPost is the JSON shape of a post.
type fuzzPost struct {
	ID        int64     `json:"id"`
	AuthorID  int64     `json:"author_id"`
	Body      string    `json:"body"`
	CreatedAt time.Time `json:"created_at"`
}

// fuzzFollow is the JSON shape of a follow listing item.
type fuzzFollow struct {
	UserID int64     `json:"user_id"`
	Since  time.Time `json:"since"`
}

func fuzzDecode[T any](t testing.TB, res fuzzResponse) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T: %v: %v", v, err, res)
	}
	return v
}

// FuzzCreatePost fuzzes POST /v1/posts: the request body (followed by pad
// spaces, so that the fuzzer reaches the 64 KiB limit), the Idempotency-Key
// header ("": none) and how the body is sent (with a Content-Length or
// chunked). A 201 creates exactly one post, with the body the contract
// decodes, and its one outbox row; a 200 is a repeat of a used key and
// writes nothing; an error writes nothing.
func FuzzCreatePost(f *testing.F) {
	env := newFuzzEnv(f)
	const author = 1
	auth := "Bearer " + env.token(f, author)
	// A key used before, which the seeds named replay* repeat.
	first, _, _ := env.serve(f, fuzzRequest{method: http.MethodPost, target: "/v1/posts",
		header: []string{"Authorization", auth, "Idempotency-Key", "replayed"}, body: []byte(`{"body": "the first"}`)})
	if first.status != http.StatusCreated {
		f.Fatalf("fixture post: %v", first)
	}

	f.Fuzz(func(t *testing.T, body []byte, key string, pad uint16, chunked bool) {
		raw := body
		if pad > 0 {
			raw = append(bytes.Clone(body), bytes.Repeat([]byte(" "), int(pad))...)
		}
		header := []string{"Authorization", auth}
		if key != "" {
			header = append(header, "Idempotency-Key", key)
		}
		before := env.state(t)
		res, hr, ok := env.serve(t, fuzzRequest{method: http.MethodPost, target: "/v1/posts", header: header, body: raw, chunked: chunked})
		if !ok {
			return
		}
		code := fuzzCheck(t, res)
		key = hr.Header.Get("Idempotency-Key") // as the API got it: net/http trims it
		var want []fuzzOutcome
		var wantBody string
		switch {
		case len(raw) > MaxBodyBytes && !fuzzValidKey(key):
			want = []fuzzOutcome{fuzzTooLarge, fuzzInvalidArgument}
		case !fuzzValidKey(key):
			want = []fuzzOutcome{fuzzInvalidArgument}
		default:
			want, wantBody = fuzzExpectPost(raw, 1000)
		}
		if want != nil {
			fuzzRequireOutcome(t, res, code, want...)
		}

		switch res.status {
		case http.StatusCreated:
			after := env.state(t)
			wantAfter := before
			wantAfter.posts, wantAfter.livePosts, wantAfter.outbox = before.posts+1, before.livePosts+1, before.outbox+1
			wantAfter.maxPostID, wantAfter.maxOutboxID = after.maxPostID, after.maxOutboxID
			// The post goes into its author's own feed before the 201, if
			// Redis holds that feed: writes there are expected.
			wantAfter.redisWrites = after.redisWrites
			if after != wantAfter || after.maxPostID <= before.maxPostID || after.maxOutboxID <= before.maxOutboxID {
				t.Fatalf("a 201 wrote other than one post and its outbox row:\nbefore %+v\nafter  %+v", before, after)
			}
			p := fuzzDecode[fuzzPost](t, res)
			if p.ID != after.maxPostID || p.AuthorID != author {
				t.Fatalf("created %+v, want id %d by %d", p, after.maxPostID, author)
			}
			if want != nil && p.Body != wantBody {
				t.Fatalf("created body %q, want %q", p.Body, wantBody)
			}
			if strings.TrimSpace(p.Body) == "" || utf8.RuneCountInString(p.Body) > 1000 || strings.ContainsRune(p.Body, 0) {
				t.Fatalf("created a body the contract refuses: %q", p.Body)
			}
			if loc := res.header.Get("Location"); loc != "/v1/posts/"+strconv.FormatInt(p.ID, 10) {
				t.Fatalf("Location %q for post %d", loc, p.ID)
			}
			var storedBody, storedKey string
			var events int
			if err := env.pool.QueryRow(context.Background(), `SELECT body, coalesce(idempotency_key, ''),
				(SELECT count(*) FROM outbox WHERE event_type = 'post.created' AND (payload->>'post_id')::bigint = $1)
				FROM posts WHERE id = $1`, p.ID).Scan(&storedBody, &storedKey, &events); err != nil {
				t.Fatal(err)
			}
			if storedBody != p.Body || storedKey != key || events != 1 {
				t.Fatalf("stored body %q key %q with %d post.created events; answered %q for key %q",
					storedBody, storedKey, events, p.Body, key)
			}
		case http.StatusOK:
			if key == "" {
				t.Fatalf("a 200 without an Idempotency-Key: %v", res)
			}
			env.requireUnchanged(t, before, res)
			p := fuzzDecode[fuzzPost](t, res)
			var firstID int64
			var firstBody string
			if err := env.pool.QueryRow(context.Background(), `SELECT id, body FROM posts WHERE author_id = $1 AND idempotency_key = $2`,
				author, key).Scan(&firstID, &firstBody); err != nil {
				t.Fatalf("a 200 for key %q, which no post has: %v", key, err)
			}
			if p.ID != firstID || p.Body != firstBody || p.AuthorID != author {
				t.Fatalf("a repeat answered %+v, not the first post %d %q", p, firstID, firstBody)
			}
		default:
			if res.status < 400 {
				t.Fatalf("unexpected answer %v", res)
			}
			env.requireUnchanged(t, before, res)
		}
	})
}

// fuzzListRoute is a listing: of posts or of follows.
type fuzzListRoute struct {
	path    string
	follows bool
	// feed: the home feed, whose reads may fill its cache in Redis.
	feed bool
}

var fuzzListRoutes = []fuzzListRoute{
	{path: "/v1/feed", feed: true},
	{path: "/v1/users/1/posts"},
	{path: "/v1/users/1/followers", follows: true},
	{path: "/v1/users/1/following", follows: true},
}

// checkPage checks a 200 listing of route r as user 1 read it with limit and
// cursor: its shape, at most limit items newest first, all after the cursor
// when the cursor has the form of the API's, and a next_cursor that the
// route accepts in turn.
func (env *fuzzEnv) checkPage(t *testing.T, r fuzzListRoute, res fuzzResponse, limit int, cursor string) {
	t.Helper()
	text := fuzzCursorText(cursor)
	var next *string
	var n int
	if r.follows {
		var items []fuzzFollow
		items, next = fuzzPage[fuzzFollow](t, res)
		n = len(items)
		var afterUs, afterID int64 = 1 << 62, 1 << 62
		if cursor != "" {
			// The route took the cursor: it must be one of a follow listing.
			us, id, ok := strings.Cut(strings.TrimPrefix(text, "f"), ":")
			var err1, err2 error
			afterUs, err1 = strconv.ParseInt(us, 10, 64)
			afterID, err2 = strconv.ParseInt(id, 10, 64)
			if !strings.HasPrefix(text, "f") || !ok || err1 != nil || err2 != nil || afterID <= 0 {
				t.Fatalf("%s took cursor %q (%q), not a follow cursor: %v", r.path, cursor, text, res)
			}
		}
		for _, it := range items {
			us := it.Since.UnixMicro()
			if us > afterUs || (us == afterUs && it.UserID >= afterID) {
				t.Fatalf("%s gave %+v, not after the cursor (%d, %d) nor the item before it: %v", r.path, it, afterUs, afterID, res)
			}
			afterUs, afterID = us, it.UserID
		}
	} else {
		var items []fuzzPost
		items, next = fuzzPage[fuzzPost](t, res)
		n = len(items)
		var before int64 = 1 << 62
		if cursor != "" {
			id, ok := fuzzPositiveID(strings.TrimPrefix(text, "p"))
			if !strings.HasPrefix(text, "p") || !ok {
				t.Fatalf("%s took cursor %q (%q), not a post cursor: %v", r.path, cursor, text, res)
			}
			before = id
		}
		for _, p := range items {
			if p.ID >= before {
				t.Fatalf("%s gave post %d, not older than the cursor or the post before it (%d): %v", r.path, p.ID, before, res)
			}
			before = p.ID
		}
	}
	if n > limit {
		t.Fatalf("%s gave %d items, over the limit %d", r.path, n, limit)
	}
	if next != nil {
		again, _, ok := env.serve(t, fuzzRequest{method: http.MethodGet,
			target: r.path + "?" + url.Values{"limit": {strconv.Itoa(limit)}, "cursor": {*next}}.Encode(),
			header: []string{"Authorization", "Bearer " + env.token(t, 1)}})
		if !ok || again.status != http.StatusOK {
			t.Fatalf("%s refuses its own next_cursor %q: %v", r.path, *next, again)
		}
	}
}

// FuzzCursor fuzzes the cursor of every listing (GET /v1/feed, and
// /v1/users/{id}/posts, followers and following) read with limit=2 over a
// small graph: a cursor is taken (200, the page after its position, whose
// own next_cursor is taken too) or refused with 400 invalid_argument, and
// one that is not base64url of the listing's kind is refused. Reads write
// nothing to PostgreSQL; a refused one writes nothing to Redis either.
func FuzzCursor(f *testing.F) {
	env := newFuzzEnv(f)
	env.fuzzFixture(f)
	// The cursors the API hands out now seed the fuzzer too.
	for i, r := range fuzzListRoutes {
		res := env.do(f, 1, http.MethodGet, r.path+"?limit=2", nil, http.StatusOK)
		var p struct {
			NextCursor *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(res.body, &p); err != nil || p.NextCursor == nil {
			f.Fatalf("%s?limit=2 has no next page: %v", r.path, res)
		}
		f.Add(uint8(i), *p.NextCursor)
	}
	auth := "Bearer " + env.token(f, 1)

	f.Fuzz(func(t *testing.T, route uint8, cursor string) {
		r := fuzzListRoutes[int(route)%len(fuzzListRoutes)]
		target := r.path + "?" + url.Values{"limit": {"2"}, "cursor": {cursor}}.Encode()
		before := env.state(t)
		res, _, ok := env.serve(t, fuzzRequest{method: http.MethodGet, target: target, header: []string{"Authorization", auth}})
		if !ok {
			t.Fatalf("GET %s does not reach the API", target)
		}
		code := fuzzCheck(t, res)
		tag := "p"
		if r.follows {
			tag = "f"
		}
		switch {
		case cursor == "":
			fuzzRequireOutcome(t, res, code, fuzzAccepted)
		case !strings.HasPrefix(fuzzCursorText(cursor), tag):
			fuzzRequireOutcome(t, res, code, fuzzInvalidArgument)
		default:
			fuzzRequireOutcome(t, res, code, fuzzAccepted, fuzzInvalidArgument)
		}
		if res.status == http.StatusOK {
			env.checkPage(t, r, res, 2, cursor)
			if r.feed { // a read may fill the feed's cache, and only that
				env.requireUnchangedButCache(t, before, res)
				return
			}
		}
		env.requireUnchanged(t, before, res)
	})
}

// FuzzQueryString fuzzes the raw query string of every listing: one that
// does not parse, repeats limit or cursor, or has a limit that is not 1–100
// is refused with 400 invalid_argument; one without a cursor is otherwise
// served, with at most limit items; other parameters are ignored. Reads
// write nothing to PostgreSQL; a refused one writes nothing to Redis either.
func FuzzQueryString(f *testing.F) {
	env := newFuzzEnv(f)
	env.fuzzFixture(f)
	auth := "Bearer " + env.token(f, 1)

	f.Fuzz(func(t *testing.T, route uint8, query string) {
		r := fuzzListRoutes[int(route)%len(fuzzListRoutes)]
		before := env.state(t)
		res, hr, ok := env.serve(t, fuzzRequest{method: http.MethodGet, target: r.path + "?" + query, header: []string{"Authorization", auth}})
		if !ok {
			return
		}
		code := fuzzCheck(t, res)
		q, err := url.ParseQuery(hr.URL.RawQuery)
		limit, limitOK := 20, true
		if l := q.Get("limit"); l != "" {
			n, ok := fuzzPositiveID(l)
			limit, limitOK = int(n), ok && n <= 100
		}
		switch {
		case err != nil, len(q["limit"]) > 1, len(q["cursor"]) > 1, !limitOK:
			fuzzRequireOutcome(t, res, code, fuzzInvalidArgument)
		case q.Get("cursor") == "":
			fuzzRequireOutcome(t, res, code, fuzzAccepted)
		default:
			fuzzRequireOutcome(t, res, code, fuzzAccepted, fuzzInvalidArgument)
		}
		if res.status == http.StatusOK {
			env.checkPage(t, r, res, limit, q.Get("cursor"))
			if r.feed {
				env.requireUnchangedButCache(t, before, res)
				return
			}
		}
		env.requireUnchanged(t, before, res)
	})
}

// FuzzBearerToken fuzzes the Authorization header ("": none) on a read, a
// post, a follow and a get: a header that is not "Bearer" and a valid HS256
// token (exp in the future, sub a positive integer) of the fuzz secret is
// refused with 401 unauthenticated and a WWW-Authenticate challenge, and
// writes nothing; a valid one acts as its sub.
func FuzzBearerToken(f *testing.F) {
	env := newFuzzEnv(f)
	post := fuzzDecode[fuzzPost](f, env.do(f, 1, http.MethodPost, "/v1/posts", []byte(`{"body": "by 1"}`), http.StatusCreated))
	routes := []struct{ method, target, body string }{
		{http.MethodGet, "/v1/feed", ""},
		{http.MethodPost, "/v1/posts", `{"body": "authenticated"}`},
		{http.MethodPut, "/v1/following/1", ""},
		{http.MethodGet, "/v1/posts/" + strconv.FormatInt(post.ID, 10), ""},
	}
	for i := range routes {
		f.Add(uint8(i), "Bearer "+env.token(f, 2))
	}

	f.Fuzz(func(t *testing.T, route uint8, header string) {
		r := routes[int(route)%len(routes)]
		var hdr []string
		if header != "" {
			hdr = []string{"Authorization", header}
		}
		var body []byte
		if r.body != "" {
			body = []byte(r.body)
		}
		before := env.state(t)
		res, hr, ok := env.serve(t, fuzzRequest{method: r.method, target: r.target, header: hdr, body: body})
		if !ok {
			return
		}
		code := fuzzCheck(t, res)
		user, valid := fuzzTokenUser(hr.Header.Get("Authorization"))
		if !valid {
			fuzzRequireOutcome(t, res, code, fuzzUnauthenticated)
			if ch := res.header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, `Bearer realm="newsfeed"`) {
				t.Fatalf("401 with WWW-Authenticate %q", ch)
			}
			env.requireUnchanged(t, before, res)
			return
		}
		switch r.method {
		case http.MethodGet:
			fuzzRequireOutcome(t, res, code, fuzzAccepted)
			env.requireUnchangedButCache(t, before, res) // a feed read may fill its cache
		case http.MethodPost:
			fuzzRequireOutcome(t, res, code, fuzzAccepted)
			if p := fuzzDecode[fuzzPost](t, res); p.AuthorID != user || env.state(t).posts != before.posts+1 {
				t.Fatalf("token of user %d created %+v", user, p)
			}
		case http.MethodPut:
			if user == 1 {
				fuzzRequireOutcome(t, res, code, fuzzSelfFollow)
				env.requireUnchanged(t, before, res)
				return
			}
			fuzzRequireOutcome(t, res, code, fuzzAccepted)
			var n int
			if err := env.pool.QueryRow(context.Background(),
				`SELECT count(*) FROM follows WHERE follower_id = $1 AND followee_id = 1`, user).Scan(&n); err != nil || n != 1 {
				t.Fatalf("token of user %d followed, but %d edges (%v)", user, n, err)
			}
		}
	})
}

// fuzzIDRoutes are the routes with an id in their path; {} is the id. The
// users that make the requests own no post, so that no delete succeeds.
var fuzzIDRoutes = []struct {
	method, path string
	as           int64
	// wrongMethod: the path is a route's, the method is not (405).
	wrongMethod bool
}{
	{method: http.MethodGet, path: "/v1/posts/{}", as: 2},
	{method: http.MethodDelete, path: "/v1/posts/{}", as: 2},
	{method: http.MethodPut, path: "/v1/following/{}", as: 3},
	{method: http.MethodDelete, path: "/v1/following/{}", as: 3},
	{method: http.MethodGet, path: "/v1/users/{}/followers", as: 2},
	{method: http.MethodGet, path: "/v1/users/{}/following", as: 2},
	{method: http.MethodGet, path: "/v1/users/{}/posts", as: 2},
	{method: http.MethodPatch, path: "/v1/posts/{}", as: 2, wrongMethod: true},
	{method: http.MethodPost, path: "/v1/following/{}", as: 3, wrongMethod: true},
	{method: http.MethodPut, path: "/v1/users/{}/posts", as: 2, wrongMethod: true},
}

// FuzzPathID fuzzes the id segment of every route with one, put in the path
// as is or path-escaped: an id that is not a positive int64 in decimal is
// refused with 400 invalid_argument (or, when the segment changes which
// route the path names, 404 or 405) and writes nothing; a valid one is
// served: a post read (200 or 404), a delete of another's post (403 or 404,
// nothing written), a follow (204 and the edge exists, or 422 for oneself),
// an unfollow (204 and no edge), a listing (200).
func FuzzPathID(f *testing.F) {
	env := newFuzzEnv(f)
	env.do(f, 1, http.MethodPost, "/v1/posts", []byte(`{"body": "keep me"}`), http.StatusCreated)
	env.do(f, 2, http.MethodPut, "/v1/following/1", nil, http.StatusNoContent)

	f.Fuzz(func(t *testing.T, route uint8, segment string, escape bool) {
		r := fuzzIDRoutes[int(route)%len(fuzzIDRoutes)]
		seg := segment
		if escape {
			seg = url.PathEscape(segment)
		}
		before := env.state(t)
		res, _, ok := env.serve(t, fuzzRequest{method: r.method, target: strings.Replace(r.path, "{}", seg, 1),
			header: []string{"Authorization", "Bearer " + env.token(t, r.as)}})
		if !ok {
			return
		}
		code := fuzzCheck(t, res)
		id, valid := fuzzPositiveID(segment)
		// Whether the path is still the route's: a raw "/" or "?" changes
		// the path, an empty id may name another route.
		if segment == "" || (!escape && strings.ContainsAny(segment, "/?")) {
			// "1?x" names id 1 after all: only a read or an error must
			// have written nothing.
			if res.status >= 400 || r.method == http.MethodGet {
				env.requireUnchanged(t, before, res)
			}
			return
		}
		switch {
		case r.wrongMethod:
			fuzzRequireOutcome(t, res, code, fuzzMethodNotAllowed)
		case !valid:
			fuzzRequireOutcome(t, res, code, fuzzInvalidArgument)
		}
		if r.wrongMethod || !valid {
			env.requireUnchanged(t, before, res)
			return
		}
		// A valid id on its route.
		var edges int
		countEdges := func() {
			if err := env.pool.QueryRow(context.Background(), `SELECT count(*) FROM follows WHERE follower_id = $1 AND followee_id = $2`,
				r.as, id).Scan(&edges); err != nil {
				t.Fatal(err)
			}
		}
		switch {
		case r.method == http.MethodGet && r.path == "/v1/posts/{}":
			fuzzRequireOutcome(t, res, code, fuzzAccepted, fuzzNotFound)
			if res.status == http.StatusOK {
				if p := fuzzDecode[fuzzPost](t, res); p.ID != id {
					t.Fatalf("GET post %d gave post %d", id, p.ID)
				}
			}
		case r.method == http.MethodGet:
			fuzzRequireOutcome(t, res, code, fuzzAccepted)
		case r.method == http.MethodDelete && r.path == "/v1/posts/{}":
			fuzzRequireOutcome(t, res, code, fuzzForbidden, fuzzNotFound)
		case r.method == http.MethodPut && id == r.as:
			fuzzRequireOutcome(t, res, code, fuzzSelfFollow)
		case r.method == http.MethodPut:
			fuzzRequireOutcome(t, res, code, fuzzAccepted)
			if countEdges(); edges != 1 {
				t.Fatalf("PUT /v1/following/%d answered %v, but %d edges", id, res, edges)
			}
		case r.method == http.MethodDelete:
			fuzzRequireOutcome(t, res, code, fuzzAccepted)
			if countEdges(); edges != 0 {
				t.Fatalf("DELETE /v1/following/%d answered %v, but %d edges", id, res, edges)
			}
		}
		if res.status >= 400 || r.method == http.MethodGet {
			env.requireUnchanged(t, before, res)
		}
	})
}

// The pure targets: the decoders themselves, without a server.

// FuzzDecodePost fuzzes the post decoder (decodeJSON and validBody) against
// the contract's oracle, fuzzExpectPost.
func FuzzDecodePost(f *testing.F) {
	s := &Server{cfg: Config{MaxChars: 1000}}
	e := echo.New()
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := e.NewContext(httptest.NewRequest(http.MethodPost, "/v1/posts", bytes.NewReader(raw)), httptest.NewRecorder())
		var req createPostRequest
		err := decodeJSON(c, &req)
		var body string
		if err == nil {
			body, err = s.validBody(req.Body)
		}
		got := fuzzAccepted
		if err != nil {
			apiErr, ok := err.(*Error)
			if !ok || apiErr.Status < 400 || apiErr.Status >= 500 || !fuzzErrorCode.MatchString(apiErr.Code) || strings.TrimSpace(apiErr.Message) == "" {
				t.Fatalf("decoding %q: error %#v, not a client error of the contract", raw, err)
			}
			got = fuzzOutcome{apiErr.Status, apiErr.Code}
		}
		want, wantBody := fuzzExpectPost(raw, 1000)
		if want != nil && !fuzzContains(want, got) {
			t.Fatalf("decoding %q: %v, want one of %v", raw, got, want)
		}
		if got == fuzzAccepted && want != nil && body != wantBody {
			t.Fatalf("decoding %q: body %q, want %q", raw, body, wantBody)
		}
		if got == fuzzAccepted && (strings.TrimSpace(body) == "" || utf8.RuneCountInString(body) > 1000 ||
			strings.ContainsRune(body, 0) || !utf8.ValidString(body)) {
			t.Fatalf("decoding %q: accepted body %q, which the contract refuses", raw, body)
		}
	})
}

func fuzzContains(want []fuzzOutcome, got fuzzOutcome) bool {
	for _, w := range want {
		if w == got {
			return true
		}
	}
	return false
}

// FuzzParsePositive fuzzes the id parser of paths, limits and cursors: it
// takes exactly the decimal digits of a positive int64.
func FuzzParsePositive(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parsePositive(s)
		want, ok := fuzzPositiveID(s)
		if (err == nil) != ok || n != want {
			t.Fatalf("parsePositive(%q) = %d, %v; want %d, ok %v", s, n, err, want, ok)
		}
	})
}

// FuzzPostCursor fuzzes the post cursor decoder (a cursor it takes names a
// positive id, in the form "p<id>" in base64url) and its round trip from any
// positive id.
func FuzzPostCursor(f *testing.F) {
	f.Fuzz(func(t *testing.T, cursor string, id int64) {
		got, err := decodePostCursor(cursor)
		switch {
		case err != nil:
			if apiErr, ok := err.(*Error); !ok || apiErr.Code != "invalid_argument" || apiErr.Status != http.StatusBadRequest {
				t.Fatalf("decodePostCursor(%q): error %#v", cursor, err)
			}
		case cursor == "":
			if got != 0 {
				t.Fatalf("no cursor decoded to %d", got)
			}
		default:
			text := fuzzCursorText(cursor)
			want, ok := fuzzPositiveID(strings.TrimPrefix(text, "p"))
			if !strings.HasPrefix(text, "p") || !ok || got != want {
				t.Fatalf("decodePostCursor(%q) (%q) = %d", cursor, text, got)
			}
		}
		if id > 0 {
			enc := encodePostCursor(id)
			if back, err := decodePostCursor(*enc); err != nil || back != id {
				t.Fatalf("post cursor of %d (%q) decoded to %d, %v", id, *enc, back, err)
			}
		}
	})
}

// FuzzFollowCursor fuzzes the follow cursor decoder (a cursor it takes
// names a time from 1970 to 9999 in UTC and a positive user id, in the form
// "f<unix µs>:<id>" in base64url) and its round trip from any such position.
func FuzzFollowCursor(f *testing.F) {
	lo, hi := time.Unix(0, 0).UTC(), time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	f.Fuzz(func(t *testing.T, cursor string, micros, userID int64) {
		got, err := decodeFollowCursor(cursor)
		switch {
		case err != nil:
			if apiErr, ok := err.(*Error); !ok || apiErr.Code != "invalid_argument" || apiErr.Status != http.StatusBadRequest {
				t.Fatalf("decodeFollowCursor(%q): error %#v", cursor, err)
			}
		case cursor == "":
			if got != nil {
				t.Fatalf("no cursor decoded to %+v", got)
			}
		default:
			text := fuzzCursorText(cursor)
			us, id, ok := strings.Cut(strings.TrimPrefix(text, "f"), ":")
			wantUs, err1 := strconv.ParseInt(us, 10, 64)
			wantID, err2 := strconv.ParseInt(id, 10, 64)
			if got == nil || !strings.HasPrefix(text, "f") || !ok || err1 != nil || err2 != nil ||
				got.UserID != wantID || got.UserID <= 0 || got.Since.UnixMicro() != wantUs ||
				got.Since.Before(lo) || got.Since.After(hi) || got.Since.Location() != time.UTC {
				t.Fatalf("decodeFollowCursor(%q) (%q) = %+v", cursor, text, got)
			}
		}
		since := time.UnixMicro(micros).UTC()
		if userID > 0 && !since.Before(lo) && !since.After(hi) {
			pos := domain.FollowCursor{Since: since, UserID: userID}
			enc := encodeFollowCursor(pos)
			if back, err := decodeFollowCursor(*enc); err != nil || *back != pos {
				t.Fatalf("follow cursor of %+v (%q) decoded to %+v, %v", pos, *enc, back, err)
			}
		}
	})
}

// FuzzAuthenticate fuzzes the authentication middleware with any
// Authorization header value (also ones net/http would not deliver): it
// passes exactly the valid tokens, as their sub, and refuses the rest with
// 401 unauthenticated and a challenge.
func FuzzAuthenticate(f *testing.F) {
	mw := authenticate(fuzzSecret)
	e := echo.New()
	f.Fuzz(func(t *testing.T, header string) {
		req := httptest.NewRequest(http.MethodGet, "/v1/feed", nil)
		if header != "" {
			req.Header["Authorization"] = []string{header}
		}
		rec := httptest.NewRecorder()
		c := e.NewContext(req, rec)
		var passed int64
		err := mw(func(c echo.Context) error { passed = userID(c); return nil })(c)
		user, valid := fuzzTokenUser(header)
		switch {
		case valid && (err != nil || passed != user):
			t.Fatalf("a valid token of user %d: passed %d, %v", user, passed, err)
		case !valid && (err != errUnauthenticated || passed != 0):
			t.Fatalf("header %q: passed %d, %v; want 401", header, passed, err)
		case !valid && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), `Bearer realm="newsfeed"`):
			t.Fatalf("header %q: 401 without a challenge", header)
		}
	})
}
