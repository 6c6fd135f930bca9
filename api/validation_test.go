package api_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// apiErr is an expected error answer.
type apiErr struct {
	status int
	code   string
}

var (
	errInvalidJSON     = apiErr{http.StatusBadRequest, "invalid_json"}
	errInvalidBody     = apiErr{http.StatusUnprocessableEntity, "invalid_body"}
	errTooLarge        = apiErr{http.StatusRequestEntityTooLarge, "too_large"}
	errInvalidArgument = apiErr{http.StatusBadRequest, "invalid_argument"}
)

// requireOneOf requires the error body shape and one of the wanted answers.
func requireOneOf(t *testing.T, res response, want ...apiErr) {
	t.Helper()
	require.Less(t, res.status, 500, "bad input never gives a 5xx: %s", res.body)
	if len(want) == 1 {
		requireError(t, res, want[0].status, want[0].code)
		return
	}
	got := apiErr{res.status, errorCode(t, res)}
	require.Contains(t, want, got, "body: %s", res.body)
}

func TestCreatePostBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)

	const maxBody = 64 << 10
	// A valid JSON object of exactly n bytes.
	padded := func(n int) []byte {
		obj := []byte(`{"body":"x"}`)
		return append(obj, bytes.Repeat([]byte(" "), n-len(obj))...)
	}

	for i, tc := range []struct {
		name   string
		body   []byte
		stream bool
		header map[string]string
		want   []apiErr
	}{
		// 400 invalid_json: not JSON, wrong types, unknown fields.
		{name: "not JSON", body: []byte(`hello`), want: []apiErr{errInvalidJSON}},
		{name: "truncated JSON", body: []byte(`{"body": "x"`), want: []apiErr{errInvalidJSON}},
		{name: "single quotes", body: []byte(`{'body': 'x'}`), want: []apiErr{errInvalidJSON}},
		{name: "empty request body", body: []byte{}, want: []apiErr{errInvalidJSON}},
		{name: "no request body", body: nil, want: []apiErr{errInvalidJSON}},
		{name: "whitespace request body", body: []byte(" \n\t "), want: []apiErr{errInvalidJSON}},
		{name: "body is a number", body: []byte(`{"body": 5}`), want: []apiErr{errInvalidJSON}},
		{name: "body is a boolean", body: []byte(`{"body": true}`), want: []apiErr{errInvalidJSON}},
		{name: "body is an array", body: []byte(`{"body": ["x"]}`), want: []apiErr{errInvalidJSON}},
		{name: "body is an object", body: []byte(`{"body": {"text": "x"}}`), want: []apiErr{errInvalidJSON}},
		{name: "unknown top-level field", body: []byte(`{"body": "x", "extra": 1}`), want: []apiErr{errInvalidJSON}},
		{name: "only an unknown field", body: []byte(`{"text": "x"}`), want: []apiErr{errInvalidJSON}},
		{name: "client-chosen id", body: []byte(`{"id": 7, "body": "x"}`), want: []apiErr{errInvalidJSON}},
		// JSON member names are case-sensitive: "Body" is not "body".
		{name: "field name in another case", body: []byte(`{"Body": "x"}`), want: []apiErr{errInvalidJSON}},
		{name: "JSON array", body: []byte(`[{"body": "x"}]`), want: []apiErr{errInvalidJSON}},
		{name: "JSON string", body: []byte(`"x"`), want: []apiErr{errInvalidJSON}},
		{name: "JSON null", body: []byte(`null`), want: []apiErr{errInvalidJSON}},
		{name: "JSON number", body: []byte(`42`), want: []apiErr{errInvalidJSON}},
		{name: "trailing garbage", body: []byte(`{"body": "x"} garbage`), want: []apiErr{errInvalidJSON}},
		{name: "trailing second object", body: []byte(`{"body": "x"}{"body": "y"}`), want: []apiErr{errInvalidJSON}},
		{name: "trailing comma", body: []byte(`{"body": "x"},`), want: []apiErr{errInvalidJSON}},
		{name: "comma inside object", body: []byte(`{"body": "x",}`), want: []apiErr{errInvalidJSON}},

		// 422 invalid_body: empty after trimming, too long, not UTF-8.
		{name: "body empty", body: []byte(`{"body": ""}`), want: []apiErr{errInvalidBody}},
		{name: "body spaces only", body: []byte(`{"body": "   "}`), want: []apiErr{errInvalidBody}},
		{name: "body white space only", body: []byte(`{"body": " \t\r\n "}`), want: []apiErr{errInvalidBody}},
		{name: "body Unicode spaces only", body: []byte(`{"body": "\u00a0\u2003\u3000"}`), want: []apiErr{errInvalidBody}},
		{name: "body missing", body: []byte(`{}`), want: []apiErr{errInvalidBody}},
		// null for a string is either a missing body or a wrong type.
		{name: "body null", body: []byte(`{"body": null}`), want: []apiErr{errInvalidBody, errInvalidJSON}},
		{name: "body 1001 ASCII characters", body: []byte(`{"body": "` + strings.Repeat("a", 1001) + `"}`), want: []apiErr{errInvalidBody}},
		{name: "body 1001 two-byte characters", body: []byte(`{"body": "` + strings.Repeat("é", 1001) + `"}`), want: []apiErr{errInvalidBody}},
		{name: "body 1001 four-byte characters", body: []byte(`{"body": "` + strings.Repeat("😀", 1001) + `"}`), want: []apiErr{errInvalidBody}},
		{name: "body 1001 escaped characters", body: []byte(`{"body": "` + strings.Repeat(`\u00e9`, 1001) + `"}`), want: []apiErr{errInvalidBody}},
		{name: "invalid UTF-8 byte in body", body: []byte("{\"body\": \"caf\xe9\"}"), want: []apiErr{errInvalidBody}},
		{name: "invalid UTF-8 0xff", body: []byte("{\"body\": \"\xff\xfe\"}"), want: []apiErr{errInvalidBody}},
		{name: "overlong UTF-8 encoding", body: []byte("{\"body\": \"\xc0\xaf\"}"), want: []apiErr{errInvalidBody}},
		{name: "UTF-8 encoded surrogate", body: []byte("{\"body\": \"\xed\xa0\x80\"}"), want: []apiErr{errInvalidBody}},
		{name: "truncated UTF-8 sequence", body: []byte("{\"body\": \"\xe2\x82\"}"), want: []apiErr{errInvalidBody}},
		{name: "invalid UTF-8 outside the string", body: []byte("{\"body\": \"x\"}\xff"), want: []apiErr{errInvalidBody, errInvalidJSON}},
		// An unpaired surrogate escape has no UTF-8 form: storing it would
		// silently change the text (encoding/json turns it into U+FFFD).
		{name: "unpaired surrogate escape", body: []byte(`{"body": "x\ud800y"}`), want: []apiErr{errInvalidBody, errInvalidJSON}},
		{name: "NUL character", body: []byte(`{"body": "a\u0000b"}`), want: []apiErr{errInvalidBody}},

		// 413 too_large.
		{name: "request body 64 KiB + 1", body: padded(maxBody + 1), want: []apiErr{errTooLarge}},
		{name: "request body 1 MiB", body: padded(1 << 20), want: []apiErr{errTooLarge}},
		{name: "request body 64 KiB + 1 chunked", body: padded(maxBody + 1), stream: true, want: []apiErr{errTooLarge}},
		{name: "request body 1 MiB chunked", body: padded(1 << 20), stream: true, want: []apiErr{errTooLarge}},
		{name: "request body over 64 KiB of text", body: []byte(`{"body": "` + strings.Repeat("a", maxBody) + `"}`), want: []apiErr{errTooLarge}},

		// 400 invalid_argument.
		{name: "Idempotency-Key of 256 characters", body: []byte(`{"body": "x"}`),
			header: map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, want: []apiErr{errInvalidArgument}},
		{name: "Idempotency-Key of 256 two-byte characters", body: []byte(`{"body": "x"}`),
			header: map[string]string{"Idempotency-Key": strings.Repeat("é", 256)}, want: []apiErr{errInvalidArgument}},
		{name: "Idempotency-Key of 10000 characters", body: []byte(`{"body": "x"}`),
			header: map[string]string{"Idempotency-Key": strings.Repeat("k", 10000)}, want: []apiErr{errInvalidArgument}},
		// Bytes PostgreSQL cannot store as text: the client's fault, not a 5xx.
		{name: "Idempotency-Key not UTF-8", body: []byte(`{"body": "x"}`),
			header: map[string]string{"Idempotency-Key": "key\xff\xfe"}, want: []apiErr{errInvalidArgument, errInvalidBody}},
	} {
		author := int64(i + 1) // each row its own author, so rows can check their own state
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: tc.body, stream: tc.stream, as: author, header: tc.header})
			requireOneOf(t, res, tc.want...)
			require.Zero(t, b.count(t, "posts", "author_id = $1", author), "no post created")
			require.Zero(t, b.count(t, "outbox", "(payload->>'author_id')::bigint = $1", author), "no outbox row")
		})
	}
	t.Cleanup(func() {
		// Nothing at all was written by any row.
		if !t.Failed() {
			require.Equal(t, state{}, b.state(t))
		}
	})
}

func TestCreatePostLimitsAccepted(t *testing.T) {
	t.Parallel()
	_, b := setup(t)

	const maxBody = 64 << 10
	for i, tc := range []struct {
		name     string
		body     []byte
		header   map[string]string
		wantBody string
	}{
		{name: "1000 ASCII characters", body: []byte(`{"body": "` + strings.Repeat("a", 1000) + `"}`), wantBody: strings.Repeat("a", 1000)},
		{name: "1000 two-byte characters", body: []byte(`{"body": "` + strings.Repeat("é", 1000) + `"}`), wantBody: strings.Repeat("é", 1000)},
		{name: "1000 three-byte characters", body: []byte(`{"body": "` + strings.Repeat("€", 1000) + `"}`), wantBody: strings.Repeat("€", 1000)},
		{name: "1000 four-byte characters", body: []byte(`{"body": "` + strings.Repeat("😀", 1000) + `"}`), wantBody: strings.Repeat("😀", 1000)},
		{name: "1000 escaped characters", body: []byte(`{"body": "` + strings.Repeat(`\u00e9`, 1000) + `"}`), wantBody: strings.Repeat("é", 1000)},
		{name: "request body of exactly 64 KiB", body: append([]byte(`{"body": "x"}`), bytes.Repeat([]byte(" "), maxBody-len(`{"body": "x"}`))...), wantBody: "x"},
		{name: "one visible character among spaces", body: []byte(`{"body": "  x  "}`)},
		{name: "Idempotency-Key of 255 characters", body: []byte(`{"body": "k"}`),
			header: map[string]string{"Idempotency-Key": strings.Repeat("k", 255)}, wantBody: "k"},
		{name: "Idempotency-Key of 255 two-byte characters", body: []byte(`{"body": "é"}`),
			header: map[string]string{"Idempotency-Key": strings.Repeat("é", 255)}, wantBody: "é"},
	} {
		author := int64(i + 1)
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: tc.body, as: author, header: tc.header})
			require.Equal(t, http.StatusCreated, res.status, "body: %.200s", res.body)
			p := decodeStrict[apiPost](t, res.body)
			if tc.wantBody != "" {
				require.Equal(t, tc.wantBody, p.Body)
			}
			got := decodeStrict[apiPost](t, b.get(t, author, "/v1/posts/"+strconv.FormatInt(p.ID, 10)).body)
			require.Equal(t, p, got, "stored as answered")
			require.Equal(t, 1, b.count(t, "posts", "author_id = $1", author))
			require.Equal(t, 1, b.count(t, "outbox", "(payload->>'author_id')::bigint = $1", author))
		})
	}
}

var badIDs = []string{"0", "-1", "abc", "9223372036854775808", "1.5", "+1", "1e3", "0x10", "99999999999999999999"}

func TestPathIDBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	// Something to lose: a post by user 1, and user 2 following user 1.
	p := b.createPost(t, 1, "keep me")
	b.follow(t, 2, 1)
	before := b.state(t)

	for _, ep := range []struct{ method, path string }{
		{http.MethodGet, "/v1/posts/%s"},
		{http.MethodDelete, "/v1/posts/%s"},
		{http.MethodPut, "/v1/following/%s"},
		{http.MethodDelete, "/v1/following/%s"},
		{http.MethodGet, "/v1/users/%s/followers"},
		{http.MethodGet, "/v1/users/%s/following"},
		{http.MethodGet, "/v1/users/%s/posts"},
	} {
		for _, id := range badIDs {
			path := strings.Replace(ep.path, "%s", url.PathEscape(id), 1)
			t.Run(ep.method+" "+path, func(t *testing.T) {
				t.Parallel()
				res := b.do(t, req{method: ep.method, path: path, as: 2})
				requireError(t, res, http.StatusBadRequest, "invalid_argument")
				require.Equal(t, before, b.state(t))
			})
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		require.Equal(t, before, b.state(t))
		require.Equal(t, http.StatusOK, b.get(t, 2, "/v1/posts/"+strconv.FormatInt(p.ID, 10)).status)
	})
}

var pagedEndpoints = []string{"/v1/users/1/followers", "/v1/users/1/following", "/v1/users/1/posts", "/v1/feed"}

func TestLimitBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)

	for _, path := range pagedEndpoints {
		for _, limit := range []string{"0", "101", "abc", "-5", "1.5", "+5", "1000000", "99999999999999999999"} {
			u := path + "?limit=" + url.QueryEscape(limit)
			t.Run(u, func(t *testing.T) {
				t.Parallel()
				requireError(t, b.get(t, 1, u), http.StatusBadRequest, "invalid_argument")
			})
		}
		for _, limit := range []string{"1", "100"} {
			u := path + "?limit=" + limit
			t.Run(u, func(t *testing.T) {
				t.Parallel()
				page[map[string]any](t, b, 1, u)
			})
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			require.Equal(t, state{}, b.state(t))
		}
	})
}

func TestCursorBadInput(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b64 := base64.RawURLEncoding.EncodeToString

	cursors := map[string]string{
		"not base64":            "!!!",
		"short base64":          "abc",
		"base64 of garbage":     b64([]byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0xff}),
		"base64 of text":        b64([]byte("hello world")),
		"std base64 of garbage": base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, 0xfd, 0xfc}),
		"base64 of nothing":     "=",
		"percent garbage":       "%%%",
		"very long":             strings.Repeat("A", 10000),
	}
	// Cursors shaped like the API's own but naming no position it gives out.
	postShaped := map[string]string{
		"post cursor of id 0":         b64([]byte("p0")),
		"post cursor of id -1":        b64([]byte("p-1")),
		"post cursor of no number":    b64([]byte("pabc")),
		"post cursor overflowing":     b64([]byte("p9223372036854775808")),
		"follow cursor on post pages": b64([]byte("f1700000000000000:5")),
	}
	followShaped := map[string]string{
		"follow cursor without id":       b64([]byte("f1700000000000000")),
		"follow cursor of user 0":        b64([]byte("f1700000000000000:0")),
		"follow cursor of no time":       b64([]byte("fabc:5")),
		"post cursor on follow pages":    b64([]byte("p5")),
		"follow cursor overflowing time": b64([]byte("f9223372036854775808:5")),
		// A time PostgreSQL cannot hold (about 26 000 BC): still bad input.
		"follow cursor far in the past": b64([]byte("f-900000000000000000:5")),
	}

	for _, path := range pagedEndpoints {
		all := map[string]string{}
		for k, v := range cursors {
			all[k] = v
		}
		extra := postShaped
		if strings.HasSuffix(path, "followers") || strings.HasSuffix(path, "following") {
			extra = followShaped
		}
		for k, v := range extra {
			all[k] = v
		}
		for name, cursor := range all {
			t.Run(path+" "+name, func(t *testing.T) {
				t.Parallel()
				requireError(t, b.get(t, 1, path+"?cursor="+url.QueryEscape(cursor)), http.StatusBadRequest, "invalid_argument")
			})
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			require.Equal(t, state{}, b.state(t))
		}
	})
}
