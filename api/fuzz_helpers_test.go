package api

// Helpers of the fuzz targets in fuzz_test.go: a server on a real database
// and Redis prefix built once per target, requests that reach the API the
// way net/http's server hands them over, the contract's checks of every
// answer (docs/openapi.yaml's among them), a snapshot of everything a request may write, and reference
// oracles written from the contract (docs/openapi.yaml), not from the code.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/openapitest"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// fuzzSecret signs the bearer tokens of the fuzz servers; the tokens in
// testdata/fuzz/FuzzBearerToken and FuzzAuthenticate are signed with it.
var fuzzSecret = []byte("test-secret")

// fuzzEnv is one API server on its own PostgreSQL database and Redis key
// prefix, built once per fuzz target (and per fuzzing worker process): a
// fuzzing worker runs its inputs one at a time, so that what changed between
// two snapshots is what the request in between wrote.
type fuzzEnv struct {
	e      *echo.Echo
	spec   *openapitest.Spec // every answer is checked against docs/openapi.yaml
	pool   *pgxpool.Pool
	writes *fuzzRedisWrites
	tokens map[int64]string
}

func newFuzzEnv(tb testing.TB) *fuzzEnv {
	tb.Helper()
	pool := testenv.NewPool(tb)
	db := store.New(pool, nil)
	rdb, prefix := testenv.NewRedis(tb)
	writes := &fuzzRedisWrites{}
	rdb.AddHook(writes)
	feeds, err := feed.New(rdb, db, feed.Config{Prefix: prefix, Backfill: 50})
	if err != nil {
		tb.Fatal(err)
	}
	// Defaults everywhere else: no rate limits, no PostgreSQL fallback.
	e, err := New(db, db, feeds, Config{Secret: fuzzSecret})
	if err != nil {
		tb.Fatal(err)
	}
	spec, err := openapitest.Load()
	if err != nil {
		tb.Fatal(err)
	}
	return &fuzzEnv{e: e, spec: spec, pool: pool, writes: writes, tokens: map[int64]string{}}
}

// token returns a valid bearer token for userID (one per user, for a day).
func (env *fuzzEnv) token(tb testing.TB, userID int64) string {
	tb.Helper()
	if tok, ok := env.tokens[userID]; ok {
		return tok
	}
	tok, err := IssueToken(fuzzSecret, userID, 24*time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	env.tokens[userID] = tok
	return tok
}

// fuzzRequest is one request. Header holds name, value pairs; a nil body
// sends none, chunked sends it without a Content-Length.
type fuzzRequest struct {
	method, target string
	header         []string
	body           []byte
	chunked        bool
}

type fuzzResponse struct {
	status int
	header http.Header
	body   []byte
}

func (r fuzzResponse) String() string {
	return fmt.Sprintf("%d %.300q", r.status, r.body)
}

// serve writes r out in HTTP/1.1 wire form, reads it back with
// http.ReadRequest as net/http's server does, and serves it with the API's
// echo instance. What net/http refuses itself, before any handler runs (a
// malformed request line, a header holding control characters), answers
// net/http's own plain 400 and never reaches the API: ok is false then. The
// request as the API saw it is returned with the answer.
func (env *fuzzEnv) serve(tb testing.TB, r fuzzRequest) (res fuzzResponse, hr *http.Request, ok bool) {
	tb.Helper()
	if strings.ContainsAny(r.method+r.target, "\r\n") {
		return fuzzResponse{}, nil, false
	}
	var w bytes.Buffer
	w.WriteString(r.method + " " + r.target + " HTTP/1.1\r\nHost: api.test\r\n")
	for i := 0; i+1 < len(r.header); i += 2 {
		if strings.ContainsAny(r.header[i+1], "\r\n") {
			return fuzzResponse{}, nil, false // another header, or the body, in disguise
		}
		w.WriteString(r.header[i] + ": " + r.header[i+1] + "\r\n")
	}
	switch {
	case r.chunked:
		w.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		cw := httputil.NewChunkedWriter(&w)
		for rest := r.body; len(rest) > 0; {
			n := min(len(rest), 4096)
			_, _ = cw.Write(rest[:n])
			rest = rest[n:]
		}
		_ = cw.Close()
		w.WriteString("\r\n")
	case r.body != nil:
		w.WriteString("Content-Length: " + strconv.Itoa(len(r.body)) + "\r\n\r\n")
		w.Write(r.body)
	default:
		w.WriteString("\r\n")
	}
	hr, err := http.ReadRequest(bufio.NewReader(&w))
	if err != nil {
		return fuzzResponse{}, nil, false
	}
	// What net/http's server checks beyond ReadRequest (which moved the
	// one Host header to hr.Host).
	for _, vv := range hr.Header {
		for _, v := range vv {
			if !fuzzValidHeaderValue(v) {
				return fuzzResponse{}, nil, false
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hr = hr.WithContext(ctx)
	rec := httptest.NewRecorder()
	env.e.ServeHTTP(rec, hr)
	res = fuzzResponse{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	if err := env.spec.Check(openapitest.Exchange{Request: hr, RequestBody: r.body, Status: res.status, Header: res.header, Body: res.body}); err != nil {
		tb.Fatalf("%v", err)
	}
	return res, hr, true
}

// fuzzValidHeaderValue is httpguts.ValidHeaderFieldValue: no control
// characters but tab.
func fuzzValidHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// do serves a request that must reach the API, made by user as (0: no
// Authorization header), for setting up fixtures.
func (env *fuzzEnv) do(tb testing.TB, as int64, method, target string, body []byte, wantStatus int) fuzzResponse {
	tb.Helper()
	var header []string
	if as != 0 {
		header = []string{"Authorization", "Bearer " + env.token(tb, as)}
	}
	res, _, ok := env.serve(tb, fuzzRequest{method: method, target: target, header: header, body: body})
	if !ok {
		tb.Fatalf("%s %s: not a request net/http accepts", method, target)
	}
	if res.status != wantStatus {
		tb.Fatalf("%s %s: %v, want %d", method, target, res, wantStatus)
	}
	return res
}

// fuzzFixture is a small social graph with posts: users 2 and 3 wrote three
// posts each, then user 1 followed them (so that user 1's feed holds all
// six) and user 4, user 1 wrote three posts (ids 7–9), and users 4, 5 and 6
// follow user 1. Post ids start at 1 in a new database, so seeds can name them.
func (env *fuzzEnv) fuzzFixture(tb testing.TB) {
	tb.Helper()
	for _, author := range []int64{2, 3} {
		for i := range 3 {
			env.do(tb, author, http.MethodPost, "/v1/posts", []byte(fmt.Sprintf(`{"body": "post %d by %d"}`, i, author)), http.StatusCreated)
		}
	}
	env.do(tb, 1, http.MethodPut, "/v1/following/2", nil, http.StatusNoContent)
	env.do(tb, 1, http.MethodPut, "/v1/following/3", nil, http.StatusNoContent)
	env.do(tb, 1, http.MethodPut, "/v1/following/4", nil, http.StatusNoContent)
	for i := range 3 {
		env.do(tb, 1, http.MethodPost, "/v1/posts", []byte(fmt.Sprintf(`{"body": "post %d by 1"}`, i)), http.StatusCreated)
	}
	for _, follower := range []int64{4, 5, 6} {
		env.do(tb, follower, http.MethodPut, "/v1/following/1", nil, http.StatusNoContent)
	}
}

// fuzzState is everything a request may write: the rows of posts (and how
// many are live), outbox, follows, follower_counts and pulled_posts, and the
// number of Redis commands other than reads the server sent (scanning the
// keys under the prefix would read every key of the shared Redis database).
type fuzzState struct {
	posts, livePosts, maxPostID int64
	outbox, maxOutboxID         int64
	follows                     int64
	followsSum, countsSum       string
	pulled                      int64
	relations                   int64 // mutes and blocks
	redisWrites                 int64
	marksLeft                   int64 // graph marks set and not taken away
}

const fuzzStateSQL = `SELECT
    (SELECT count(*) FROM posts),
    (SELECT count(*) FROM posts WHERE deleted_at IS NULL),
    (SELECT coalesce(max(id), 0) FROM posts),
    (SELECT count(*) FROM outbox),
    (SELECT coalesce(max(id), 0) FROM outbox),
    (SELECT count(*) FROM follows),
    (SELECT coalesce(md5(string_agg(follower_id || '>' || followee_id || '@' || created_at, ',' ORDER BY followee_id, follower_id)), '') FROM follows),
    (SELECT coalesce(md5(string_agg(user_id || ':' || followers || ':' || pulled, ',' ORDER BY user_id)), '') FROM follower_counts),
    (SELECT count(*) FROM pulled_posts),
    (SELECT count(*) FROM mutes) + (SELECT count(*) FROM blocks)`

func (env *fuzzEnv) state(tb testing.TB) fuzzState {
	tb.Helper()
	var s fuzzState
	if err := env.pool.QueryRow(context.Background(), fuzzStateSQL).Scan(&s.posts, &s.livePosts, &s.maxPostID,
		&s.outbox, &s.maxOutboxID, &s.follows, &s.followsSum, &s.countsSum, &s.pulled, &s.relations); err != nil {
		tb.Fatalf("read the database state: %v", err)
	}
	s.redisWrites, _ = env.writes.count()
	s.marksLeft = env.writes.marksLeft()
	return s
}

// fuzzRedisReads are the commands that write nothing.
var fuzzRedisReads = map[string]bool{
	"exists": true, "get": true, "mget": true, "hget": true, "hmget": true, "hgetall": true, "hkeys": true,
	"scard": true, "sismember": true, "smismember": true, "smembers": true, "ttl": true, "pttl": true,
	"zcard": true, "zcount": true, "zrange": true, "zrangebyscore": true, "zrevrange": true,
	"zrevrangebyscore": true, "zscore": true, "zmscore": true, "zrank": true, "zrevrank": true,
	"type": true, "keys": true, "scan": true, "evalsha_ro": true, "eval_ro": true,
	"ping": true, "hello": true, "client": true, "auth": true, "select": true, "info": true,
	"multi": true, "exec": true,
}

// fuzzRedisWrites is a hook that counts the commands a client sends that
// may write (unknown ones and scripts among them). The mark a request sets
// on its user's feed while its change is in flight (changes:{id}), and
// takes away before it answers, is counted apart: marks is how many were
// set and not taken away.
type fuzzRedisWrites struct {
	mu    sync.Mutex
	n     int64
	marks int64
	last  []string
}

func (w *fuzzRedisWrites) saw(cmds ...redis.Cmder) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range cmds {
		if delta, ok := fuzzGraphMark(c); ok {
			w.marks += delta
			continue
		}
		if name := c.Name(); !fuzzRedisReads[name] {
			w.n++
			w.last = append(w.last, c.String())
			if len(w.last) > 5 {
				w.last = w.last[1:]
			}
		}
	}
}

// fuzzGraphMark tells whether c is a command on the graph marks, and what
// it does to the marks set: 1 sets one, -1 takes one away, 0 (expiries)
// neither.
func fuzzGraphMark(c redis.Cmder) (delta int64, ok bool) {
	args := c.Args()
	if len(args) < 2 {
		return 0, false
	}
	if key, _ := args[1].(string); !strings.Contains(key, ":changes:") {
		return 0, false
	}
	switch c.Name() {
	case "zadd":
		return 1, true
	case "zrem":
		return -1, true
	}
	return 0, true // zremrangebyscore, pexpire
}

func (w *fuzzRedisWrites) count() (int64, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, append([]string(nil), w.last...)
}

// marksLeft is how many graph marks were set and not taken away.
func (w *fuzzRedisWrites) marksLeft() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.marks
}

func (w *fuzzRedisWrites) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *fuzzRedisWrites) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.saw(cmd)
		return next(ctx, cmd)
	}
}

func (w *fuzzRedisWrites) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		w.saw(cmds...)
		return next(ctx, cmds)
	}
}

// requireUnchanged fails when anything was written since before.
func (env *fuzzEnv) requireUnchanged(t *testing.T, before fuzzState, res fuzzResponse) {
	t.Helper()
	if after := env.state(t); after != before {
		_, last := env.writes.count()
		t.Fatalf("written by a request answered %v:\nbefore %+v\nafter  %+v\nlast Redis writes %q", res, before, after, last)
	}
}

// requireUnchangedButCache is requireUnchanged for a home feed read that
// answered 200: it may fill the feed's cache in Redis, and write nothing else.
func (env *fuzzEnv) requireUnchangedButCache(t *testing.T, before fuzzState, res fuzzResponse) {
	t.Helper()
	after := env.state(t)
	after.redisWrites = before.redisWrites
	if after != before {
		t.Fatalf("written by a feed read answered %v:\nbefore %+v\nafter  %+v", res, before, after)
	}
}

var fuzzErrorCode = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// fuzzCheck requires what holds for every answer: never a 5xx; an error is
// JSON of exactly {"error": {"code": "snake_case", "message": "…"}}; a
// success with a body is JSON. It returns the error code ("" for a success).
func fuzzCheck(t *testing.T, res fuzzResponse) string {
	t.Helper()
	if res.status >= 500 {
		t.Fatalf("a 5xx for client input: %v", res)
	}
	if res.status < 400 {
		if len(res.body) > 0 && !json.Valid(res.body) {
			t.Fatalf("a success that is not JSON: %v", res)
		}
		return ""
	}
	if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error Content-Type %q: %v", ct, res)
	}
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(res.body, &outer); err != nil || len(outer) != 1 || outer["error"] == nil {
		t.Fatalf("error body is not {\"error\": …} alone: %v", res)
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(outer["error"], &inner); err != nil || len(inner) != 2 {
		t.Fatalf("error is not an object of exactly code and message: %v", res)
	}
	var code, message string
	if err := json.Unmarshal(inner["code"], &code); err != nil || inner["code"] == nil {
		t.Fatalf("error code is not a string: %v", res)
	}
	if err := json.Unmarshal(inner["message"], &message); err != nil || inner["message"] == nil {
		t.Fatalf("error message is not a string: %v", res)
	}
	if !fuzzErrorCode.MatchString(code) {
		t.Fatalf("error code %q is not snake_case: %v", code, res)
	}
	if strings.TrimSpace(message) == "" {
		t.Fatalf("empty error message: %v", res)
	}
	if strings.Contains(message, "goroutine") || strings.Contains(message, ".go:") {
		t.Fatalf("error message leaks internals: %v", res)
	}
	return code
}

// fuzzOutcome is an answer the contract allows: a status and error code;
// fuzzAccepted stands for a 2xx.
type fuzzOutcome struct {
	status int
	code   string
}

func (o fuzzOutcome) String() string {
	if o == fuzzAccepted {
		return "accepted"
	}
	return strconv.Itoa(o.status) + " " + o.code
}

var (
	fuzzAccepted         = fuzzOutcome{200, ""}
	fuzzTooLarge         = fuzzOutcome{http.StatusRequestEntityTooLarge, "too_large"}
	fuzzInvalidJSON      = fuzzOutcome{http.StatusBadRequest, "invalid_json"}
	fuzzInvalidBody      = fuzzOutcome{http.StatusUnprocessableEntity, "invalid_body"}
	fuzzInvalidArgument  = fuzzOutcome{http.StatusBadRequest, "invalid_argument"}
	fuzzUnauthenticated  = fuzzOutcome{http.StatusUnauthorized, "unauthenticated"}
	fuzzNotFound         = fuzzOutcome{http.StatusNotFound, "not_found"}
	fuzzForbidden        = fuzzOutcome{http.StatusForbidden, "forbidden"}
	fuzzMethodNotAllowed = fuzzOutcome{http.StatusMethodNotAllowed, "method_not_allowed"}
	fuzzSelfFollow       = fuzzOutcome{http.StatusUnprocessableEntity, "cannot_follow_self"}
)

// fuzzRequireOutcome requires that res, already checked by fuzzCheck with
// code, is one of want.
func fuzzRequireOutcome(t *testing.T, res fuzzResponse, code string, want ...fuzzOutcome) {
	t.Helper()
	got := fuzzOutcome{res.status, code}
	if res.status >= 200 && res.status < 300 {
		got = fuzzAccepted
	}
	for _, w := range want {
		if got == w {
			return
		}
	}
	t.Fatalf("answered %v (%v), want one of %v", got, res, want)
}

// surrogateEscape is a \uD800–\uDFFF escape, a half of a UTF-16 pair.
var surrogateEscape = regexp.MustCompile(`\\u[dD][89a-fA-F][0-9a-fA-F]{2}`)

// fuzzExpectPost is what the contract says of the request body raw of
// POST /v1/posts (with a valid Idempotency-Key): the outcomes allowed (more
// than one where the contract leaves the choice open; nil where this oracle
// cannot tell: a "body" member given twice) and, when accepted, the post's
// body.
func fuzzExpectPost(raw []byte, maxChars int) (want []fuzzOutcome, body string) {
	if len(raw) > MaxBodyBytes {
		return []fuzzOutcome{fuzzTooLarge}, ""
	}
	if !utf8.Valid(raw) {
		return []fuzzOutcome{fuzzInvalidBody, fuzzInvalidJSON}, ""
	}
	if !json.Valid(raw) {
		if surrogateEscape.Match(raw) { // which is checked first is open
			return []fuzzOutcome{fuzzInvalidJSON, fuzzInvalidBody}, ""
		}
		return []fuzzOutcome{fuzzInvalidJSON}, ""
	}
	if fuzzLoneSurrogate(raw) {
		return []fuzzOutcome{fuzzInvalidBody, fuzzInvalidJSON}, ""
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return []fuzzOutcome{fuzzInvalidJSON}, "" // not an object
	}
	var values []json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		var v json.RawMessage
		if err != nil || dec.Decode(&v) != nil {
			panic("json.Valid passed what Decoder refuses: " + string(raw))
		}
		if tok != "body" { // names are case-sensitive
			return []fuzzOutcome{fuzzInvalidJSON}, ""
		}
		values = append(values, v)
	}
	switch {
	case len(values) == 0:
		return []fuzzOutcome{fuzzInvalidBody}, ""
	case len(values) > 1:
		return nil, ""
	case string(values[0]) == "null": // missing, or the wrong type
		return []fuzzOutcome{fuzzInvalidBody, fuzzInvalidJSON}, ""
	}
	if err := json.Unmarshal(values[0], &body); err != nil {
		return []fuzzOutcome{fuzzInvalidJSON}, ""
	}
	if strings.TrimSpace(body) == "" || utf8.RuneCountInString(body) > maxChars || strings.ContainsRune(body, 0) {
		return []fuzzOutcome{fuzzInvalidBody}, ""
	}
	return []fuzzOutcome{fuzzAccepted}, body
}

// fuzzLoneSurrogate reports whether valid JSON raw has a string with a
// \uXXXX escape of half a UTF-16 pair that is not paired: reading strings
// token by token, as a JSON parser does.
func fuzzLoneSurrogate(raw []byte) bool {
	unit := func(i int) rune { // the escape \uXXXX at raw[i:i+6], or -1
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(n)
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && raw[i+1] != 'u':
			i++
		case c == '\\':
			r := unit(i)
			i += 5
			if !utf16.IsSurrogate(r) {
				continue
			}
			if low := unit(i + 1); low >= 0 && utf16.DecodeRune(r, low) != utf8.RuneError {
				i += 6
				continue
			}
			return true
		}
	}
	return false
}

// fuzzValidKey is the contract's Idempotency-Key: at most 255 characters of
// UTF-8 without NUL ("" is no key).
func fuzzValidKey(key string) bool {
	return utf8.ValidString(key) && !strings.ContainsRune(key, 0) && utf8.RuneCountInString(key) <= 255
}

var fuzzDigits = regexp.MustCompile(`^[0-9]+$`)

// fuzzPositiveID is the contract's id: a positive int64 in decimal digits.
func fuzzPositiveID(s string) (int64, bool) {
	if !fuzzDigits.MatchString(s) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// fuzzTokenUser is the contract's bearer authentication of an Authorization
// header: "Bearer" (any case), a space, and an HS256 JWT signed with the
// secret, with an exp in the future and a sub that is a positive integer.
func fuzzTokenUser(header string) (int64, bool) {
	scheme, raw, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return 0, false
	}
	var claims jwt.RegisteredClaims
	tok, err := jwt.ParseWithClaims(strings.TrimSpace(raw), &claims, func(tok *jwt.Token) (any, error) {
		if tok.Method != jwt.SigningMethodHS256 {
			return nil, fmt.Errorf("alg %v", tok.Header["alg"])
		}
		return fuzzSecret, nil
	}, jwt.WithExpirationRequired())
	if err != nil || !tok.Valid || claims.ExpiresAt == nil || !claims.ExpiresAt.After(time.Now()) {
		return 0, false
	}
	return fuzzPositiveID(claims.Subject)
}

// fuzzPage decodes a listing: exactly items (an array) and next_cursor (null
// or a non-empty string).
func fuzzPage[T any](t *testing.T, res fuzzResponse) ([]T, *string) {
	t.Helper()
	var shape map[string]json.RawMessage
	if err := json.Unmarshal(res.body, &shape); err != nil || len(shape) != 2 ||
		!bytes.HasPrefix(shape["items"], []byte("[")) || shape["next_cursor"] == nil {
		t.Fatalf("not a page of exactly items and next_cursor: %v", res)
	}
	var p struct {
		Items      []T     `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("page: %v: %v", err, res)
	}
	if p.NextCursor != nil && *p.NextCursor == "" {
		t.Fatalf("an empty next_cursor: %v", res)
	}
	return p.Items, p.NextCursor
}

// fuzzCursorText is a cursor's decoded text when it is base64url (the form
// of the API's cursors), else "".
func fuzzCursorText(cursor string) string {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return ""
	}
	return string(raw)
}
