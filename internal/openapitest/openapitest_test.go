package openapitest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/openapitest"
)

const (
	token  = "Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig" // the check never verifies a token
	post   = `{"id":71,"author_id":123,"body":"Good morning","created_at":"2026-11-30T08:00:00.123Z"}`
	page   = `{"items":[` + post + `],"next_cursor":null}`
	asJSON = "application/json"
)

// exchange builds an exchange: method and target, whether a bearer token
// was sent, the request body, and the answer.
type exchange struct {
	method, target string
	noToken        bool
	sent           string
	status         int
	header         map[string]string
	body           string
}

func (e exchange) build() openapitest.Exchange {
	req := httptest.NewRequest(e.method, e.target, nil)
	if !e.noToken {
		req.Header.Set("Authorization", token)
	}
	header := http.Header{}
	for k, v := range e.header {
		header.Set(k, v)
	}
	if e.body != "" && header.Get("Content-Type") == "" {
		header.Set("Content-Type", asJSON)
	}
	return openapitest.Exchange{Request: req, RequestBody: []byte(e.sent), Status: e.status, Header: header, Body: []byte(e.body)}
}

func load(t *testing.T) *openapitest.Spec {
	t.Helper()
	spec, err := openapitest.Load()
	require.NoError(t, err)
	return spec
}

// What the API answers is allowed: the check is not a wall that fails
// everything.
func TestAllowedExchanges(t *testing.T) {
	t.Parallel()
	spec := load(t)
	for name, e := range map[string]exchange{
		"a post":         {method: "GET", target: "/v1/posts/71", status: 200, body: post},
		"a created post": {method: "POST", target: "/v1/posts", sent: `{"body":"Good morning"}`, status: 201, header: map[string]string{"Location": "/v1/posts/71"}, body: post},
		"a page":         {method: "GET", target: "/v1/feed?limit=5", status: 200, body: page},
		"an empty limit": {method: "GET", target: "/v1/feed?limit=&cursor=", status: 200, body: page},
		"a follow":       {method: "PUT", target: "/v1/following/2", status: 204},
		"a bad id":       {method: "GET", target: "/v1/posts/abc", status: 400, body: `{"error":{"code":"invalid_argument","message":"id"}}`},
		"an empty id":    {method: "GET", target: "/v1/users//posts", status: 400, body: `{"error":{"code":"invalid_argument","message":"id"}}`},
		"an empty id, a wrong method": {method: "PUT", target: "/v1/users//posts", status: 405, header: map[string]string{"Allow": "OPTIONS, GET"},
			body: `{"error":{"code":"method_not_allowed","message":"no"}}`},
		"an empty last id": {method: "DELETE", target: "/v1/following/", status: 404, body: `{"error":{"code":"not_found","message":"no such route"}}`},
		// A path below a route that ends in a parameter is no route
		// (routing.NoDeeperPaths), whatever the method: the fuzzer's
		// POST /v1/following//, //0 and /0/ once answered 405.
		"an empty last id and a slash, a wrong method": {method: "POST", target: "/v1/following//", status: 404, body: `{"error":{"code":"not_found","message":"no such route"}}`},
		"an empty id and more, a wrong method":         {method: "POST", target: "/v1/following//0", status: 404, body: `{"error":{"code":"not_found","message":"no such route"}}`},
		"a last id and a slash, a wrong method":        {method: "POST", target: "/v1/following/0/", status: 404, body: `{"error":{"code":"not_found","message":"no such route"}}`},
		"a last id and more":                           {method: "PUT", target: "/v1/following/7/8", status: 404, body: `{"error":{"code":"not_found","message":"no such route"}}`},
		"a post id and more":                           {method: "GET", target: "/v1/posts/1/x/", status: 404, body: `{"error":{"code":"not_found","message":"no such route"}}`},
		"a middle id and more":                         {method: "GET", target: "/v1/users/1/2/posts", status: 404, body: `{"error":{"code":"not_found","message":"no such route"}}`},
		"no token":                                     {method: "GET", target: "/v1/feed", noToken: true, status: 401, header: map[string]string{"WWW-Authenticate": `Bearer realm="newsfeed"`}, body: `{"error":{"code":"unauthenticated","message":"no"}}`},
		"rate limited":                                 {method: "PUT", target: "/v1/following/2", status: 429, header: map[string]string{"Retry-After": "3"}, body: `{"error":{"code":"rate_limited","message":"slow"}}`},
		"an unknown path":                              {method: "GET", target: "/nope", status: 404, body: `{"error":{"code":"not_found","message":"no such route"}}`},
		"a wrong method":                               {method: "PATCH", target: "/v1/posts/1", status: 405, header: map[string]string{"Allow": "OPTIONS, DELETE, GET"}, body: `{"error":{"code":"method_not_allowed","message":"no"}}`},
		"OPTIONS":                                      {method: "OPTIONS", target: "/v1/posts", status: 204, header: map[string]string{"Allow": "OPTIONS, POST"}},
		"HEAD, a wrong one":                            {method: "HEAD", target: "/v1/feed", status: 405, header: map[string]string{"Allow": "OPTIONS, GET"}},
		"headers too large":                            {method: "GET", target: "/v1/feed", status: 431, header: map[string]string{"Content-Type": "text/plain; charset=utf-8"}, body: "431 Request Header Fields Too Large"},
		"too large, unknown path": {method: "POST", target: "/nope", sent: "{}", status: 413,
			body: `{"error":{"code":"too_large","message":"big"}}`},
		"the description": {method: "GET", target: "/openapi.yaml", noToken: true, status: 200,
			header: map[string]string{"Content-Type": "application/yaml"}, body: "openapi: 3.1.0\ninfo: {title: t, version: '1'}\npaths: {}\n"},
		"the stream, the token in the query": {method: "GET", target: "/v1/feed/stream?access_token=t", noToken: true, status: 200,
			header: map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}, body: "retry: 2000\n\n"},
		"metrics": {method: "GET", target: "/metrics", noToken: true, status: 200,
			header: map[string]string{"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}, body: "x 1\n"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, spec.Check(e.build()))
		})
	}
}

// Each kind of drift fails, and the message names the request, the answer,
// the operation and what drifted.
func TestDrift(t *testing.T) {
	t.Parallel()
	spec := load(t)
	for name, tc := range map[string]struct {
		e    exchange
		want []string
	}{
		"a route the description lacks": {
			exchange{method: "GET", target: "/v1/feed/archive", status: 200, header: map[string]string{"Content-Type": "text/event-stream"}, body: "event: post\n"},
			[]string{"GET /v1/feed/archive answered 200", "no path of docs/openapi.yaml matches /v1/feed/archive", "describe the route"},
		},
		"a method the description lacks": {
			exchange{method: "PATCH", target: "/v1/posts/7", status: 200, body: post},
			[]string{"no PATCH operation on /v1/posts/{id} (only DELETE, GET)"},
		},
		"a route the API lacks": {
			exchange{method: "GET", target: "/v1/feed", status: 405, header: map[string]string{"Allow": "OPTIONS"}, body: `{"error":{"code":"method_not_allowed","message":"no"}}`},
			[]string{"operation getFeed (GET /v1/feed) is described, but the API answered 405"},
		},
		"an undocumented status": {
			exchange{method: "GET", target: "/v1/feed", status: 418, body: `{"error":{"code":"teapot","message":"no"}}`},
			[]string{"operation getFeed (GET /v1/feed) documents no response 418"},
		},
		"a missing field": {
			exchange{method: "GET", target: "/v1/posts/71", status: 200, body: `{"id":71,"author_id":123,"body":"x"}`},
			[]string{"operation getPost (GET /v1/posts/{id}), response 200", "created_at"},
		},
		"a field of the wrong type": {
			exchange{method: "GET", target: "/v1/feed", status: 200, body: `{"items":[],"next_cursor":7}`},
			[]string{"operation getFeed", "next_cursor"},
		},
		"an id that is not positive": {
			exchange{method: "GET", target: "/v1/posts/71", status: 200, body: `{"id":0,"author_id":123,"body":"x","created_at":"2026-11-30T08:00:00Z"}`},
			[]string{"getPost", "/id"},
		},
		"an id over int64": {
			exchange{method: "GET", target: "/v1/posts/71", status: 200, body: `{"id":9223372036854775808,"author_id":123,"body":"x","created_at":"2026-11-30T08:00:00Z"}`},
			[]string{"getPost", "at '/id'", "9223372036854775808 is not an int64"},
		},
		"a time that is not UTC": {
			exchange{method: "GET", target: "/v1/posts/71", status: 200, body: `{"id":1,"author_id":123,"body":"x","created_at":"2026-11-30T08:00:00+01:00"}`},
			[]string{"getPost", "at '/created_at'"},
		},
		"a time that is not a time": {
			exchange{method: "GET", target: "/v1/posts/71", status: 200, body: `{"id":1,"author_id":123,"body":"x","created_at":"yesterday Z"}`},
			[]string{"getPost", "at '/created_at'", "date-time"},
		},
		"data after the body accepted": {
			exchange{method: "POST", target: "/v1/posts", sent: `{"body":"hi"} {}`, status: 201, header: map[string]string{"Location": "/v1/posts/71"}, body: post},
			[]string{"createPost", "the request body is not JSON: data after the JSON value"},
		},
		"no body accepted": {
			exchange{method: "POST", target: "/v1/posts", status: 201, header: map[string]string{"Location": "/v1/posts/71"}, body: post},
			[]string{"createPost", "the request body is required"},
		},
		"another error code": {
			exchange{method: "PUT", target: "/v1/following/1", status: 422, body: `{"error":{"code":"invalid_body","message":"x"}}`},
			[]string{"operation follow (PUT /v1/following/{user_id}), response 422"},
		},
		"an error of another shape": {
			exchange{method: "GET", target: "/nope", status: 404, body: `{"message":"not found"}`},
			[]string{"response 404 (components.responses in docs/openapi.yaml): the body is not its schema"},
		},
		"a wrong Content-Type": {
			exchange{method: "GET", target: "/v1/feed", status: 200, header: map[string]string{"Content-Type": "text/html"}, body: page},
			[]string{"getFeed", "text/html"},
		},
		"a required header missing": {
			exchange{method: "POST", target: "/v1/posts", sent: `{"body":"hi"}`, status: 429, body: `{"error":{"code":"rate_limited","message":"slow"}}`},
			[]string{"operation createPost (POST /v1/posts), response 429", `"Retry-After" missing`},
		},
		"a Location missing": {
			exchange{method: "POST", target: "/v1/posts", sent: `{"body":"hi"}`, status: 201, body: post},
			[]string{"operation createPost (POST /v1/posts), response 201", `"Location" missing`},
		},
		"a body where none is described": {
			exchange{method: "DELETE", target: "/v1/posts/1", status: 204, body: "{}"},
			[]string{"operation deletePost (DELETE /v1/posts/{id}), response 204 is described without content, but the API sent 2 bytes"},
		},
		"no body where one is described": {
			exchange{method: "GET", target: "/v1/posts/1", status: 200, header: map[string]string{"Content-Type": asJSON}},
			[]string{"getPost", "response 200 is described with content [application/json], but the API sent no body"},
		},
		"a limit out of range accepted": {
			exchange{method: "GET", target: "/v1/feed?limit=0", status: 200, body: page},
			[]string{"the API accepted a request the description refuses", `parameter "limit"`},
		},
		"no token accepted": {
			exchange{method: "GET", target: "/v1/feed", noToken: true, status: 200, body: page},
			[]string{"getFeed", "the API accepted a request the description refuses", "no bearer token"},
		},
		"a token in the query accepted off the stream": {
			exchange{method: "GET", target: "/v1/feed?access_token=t", noToken: true, status: 200, body: page},
			[]string{"getFeed", "the API accepted a request the description refuses", "no bearer token"},
		},
		"the stream accepted without any token": {
			exchange{method: "GET", target: "/v1/feed/stream", noToken: true, status: 200,
				header: map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}, body: "retry: 2000\n\n"},
			[]string{"streamFeed", "the API accepted a request the description refuses", "no bearer token", "no access_token query parameter"},
		},
		"an unknown field accepted": {
			exchange{method: "POST", target: "/v1/posts", sent: `{"body":"hi","title":"x"}`, status: 201, header: map[string]string{"Location": "/v1/posts/71"}, body: post},
			[]string{"createPost", "the API accepted a request the description refuses"},
		},
		"an empty id accepted": {
			exchange{method: "GET", target: "/v1/users//posts", status: 200, body: page},
			[]string{"(GET /v1/users/{id}/posts)", "accepted a request the description refuses", "the path parameter id is empty"},
		},
		"an empty last id routed": {
			exchange{method: "GET", target: "/v1/posts/", status: 200, body: post},
			[]string{"no path of docs/openapi.yaml matches /v1/posts/, but the API answered 200"},
		},
		"a path below a route, routed": {
			exchange{method: "PUT", target: "/v1/following/7/8", status: 204},
			[]string{"no path of docs/openapi.yaml matches /v1/following/7/8, but the API answered 204"},
		},
		"a path below a route, a wrong method": {
			exchange{method: "POST", target: "/v1/following/0/", status: 405, header: map[string]string{"Allow": "DELETE, OPTIONS, PUT"}, body: `{"error":{"code":"method_not_allowed","message":"no"}}`},
			[]string{"no path of docs/openapi.yaml matches /v1/following/0/, but the API answered 405"},
		},
		"an Allow header that lists another method": {
			exchange{method: "PATCH", target: "/v1/feed", status: 405, header: map[string]string{"Allow": "OPTIONS, GET, POST"}, body: `{"error":{"code":"method_not_allowed","message":"no"}}`},
			[]string{`the API's Allow header "OPTIONS, GET, POST" is not the methods docs/openapi.yaml describes for /v1/feed, GET, OPTIONS`},
		},
		"a 405 without Allow": {
			exchange{method: "PATCH", target: "/v1/feed", status: 405, body: `{"error":{"code":"method_not_allowed","message":"no"}}`},
			[]string{`the API's Allow header "" is not the methods`},
		},
		"a 404 as plain text": {
			exchange{method: "GET", target: "/nope", status: 404, header: map[string]string{"Content-Type": "text/plain"}, body: "404 page not found"},
			[]string{`response 404 (components.responses in docs/openapi.yaml): Content-Type "text/plain" is not one of [application/json]`},
		},
		"a 405 on a path the description lacks": {
			exchange{method: "POST", target: "/v1/nope", status: 405, header: map[string]string{"Allow": "GET"}, body: `{"error":{"code":"method_not_allowed","message":"no"}}`},
			[]string{"no path of docs/openapi.yaml matches /v1/nope, but the API answered 405"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := spec.Check(tc.e.build())
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.True(t, strings.HasPrefix(err.Error(), "docs/openapi.yaml and the API disagree: "+tc.e.method+" "), err.Error())
		})
	}
}

// The description itself: every operation documents the statuses that any
// request can get (405 for the path's other methods, 413, 431, 500), and
// every authenticated one 401 and 503.
func TestEveryOperationDocumentsTheCommonStatuses(t *testing.T) {
	t.Parallel()
	spec := load(t)
	for _, op := range spec.Operations() {
		statuses := spec.Statuses(op)
		for _, status := range []string{"405", "413", "431", "500"} {
			require.Contains(t, statuses, status, "%s in docs/openapi.yaml", op)
		}
		if spec.Authenticated(op) {
			for _, status := range []string{"401", "503"} {
				require.Contains(t, statuses, status, "%s in docs/openapi.yaml (authenticated)", op)
			}
		}
	}
}

// BenchmarkCheck: what checking one answer costs the tests (a page of 20
// posts).
func BenchmarkCheck(b *testing.B) {
	spec, err := openapitest.Load()
	require.NoError(b, err)
	items := strings.TrimSuffix(strings.Repeat(post+",", 20), ",")
	x := exchange{method: "GET", target: "/v1/feed?limit=20", status: 200, body: `{"items":[` + items + `],"next_cursor":"cDcx"}`}.build()
	for b.Loop() {
		if err := spec.Check(x); err != nil {
			b.Fatal(err)
		}
	}
}
