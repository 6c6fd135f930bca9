package api_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/docs"
	"github.com/newsfeed/newsfeed/internal/openapitest"
	"github.com/newsfeed/newsfeed/web"
)

// The API serves its description, open like /healthz, as the binary embeds
// it.
func TestServesItsDescription(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	res := b.do(t, req{method: http.MethodGet, path: "/openapi.yaml"})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "application/yaml", res.header.Get("Content-Type"))
	require.Equal(t, docs.OpenAPI, res.body)
	require.True(t, bytes.HasPrefix(res.body, []byte("openapi: 3.1")), "%.40q", res.body)
}

var echoParam = regexp.MustCompile(`:[a-z_]+`)

// Every route the API serves is described in docs/openapi.yaml and every
// described operation is a route: a route added without its description,
// or a description left behind by a route that is gone, fails here before
// any test sends it a request. The API is built with everything it can
// serve: the operations endpoints, the web app and development mode.
func TestEveryRouteIsDescribed(t *testing.T) {
	t.Parallel()
	spec, err := openapitest.Load()
	require.NoError(t, err)
	e := newAPI(t, nil, nil, nil, api.Config{Secret: testSecret, Ops: http.NotFoundHandler(),
		App: web.New(web.Config{Dev: true}), DevTokens: true})
	reached := map[string]bool{}
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound { // a 404 below a route (routing.NoDeeperPaths)
			continue
		}
		op := spec.OperationFor(r.Method, echoParam.ReplaceAllString(r.Path, "1"))
		require.NotEmpty(t, op, "the API serves %s %s, which docs/openapi.yaml does not describe", r.Method, r.Path)
		reached[op] = true
	}
	for _, op := range spec.Operations() {
		require.True(t, reached[op], "docs/openapi.yaml describes %s, which the API does not serve", op)
	}
}

// The helper every test sends its requests through checks the answers
// against docs/openapi.yaml: an API that drifted fails the test that met
// the drift, with what drifted.
func TestEveryAnswerIsChecked(t *testing.T) {
	t.Parallel()
	drifted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"items":null,"next_cursor":null}`))
	}))
	t.Cleanup(drifted.Close)
	b := &testBundle{srv: drifted, secret: testSecret}
	_, err := b.tryDo(req{method: http.MethodGet, path: "/v1/feed", auth: "Bearer x"})
	require.ErrorContains(t, err, "docs/openapi.yaml and the API disagree: GET /v1/feed answered 200")
	require.ErrorContains(t, err, "at '/items': got null, want array")
}
