package api_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/docs"
	"github.com/newsfeed/newsfeed/internal/openapitest"
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

var echoParam = regexp.MustCompile(`:([a-z_]+)`)

// Every route the API serves is described in docs/openapi.yaml and every
// described operation is a route: a route added without its description,
// or a description left behind by a route that is gone, fails here before
// any test sends it a request.
func TestEveryRouteIsDescribed(t *testing.T) {
	t.Parallel()
	spec, err := openapitest.Load()
	require.NoError(t, err)
	e := api.New(nil, nil, nil, api.Config{Secret: testSecret, Ops: http.NotFoundHandler()})
	var served []string
	for _, r := range e.Routes() {
		served = append(served, r.Method+" "+echoParam.ReplaceAllString(r.Path, "{$1}"))
	}
	slices.Sort(served)
	served = slices.Compact(served)
	require.Equal(t, spec.Operations(), served, "the operations of docs/openapi.yaml (expected) and the routes api.New serves (actual)")
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
