package api_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
)

func withDevTokens(cfg *api.Config) { cfg.DevTokens = true }

func TestDevTokenDoesNotExistWithoutDev(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	res := b.do(t, req{method: http.MethodPost, path: "/dev/token", body: []byte(`{"user_id": 7}`)})
	requireError(t, res, http.StatusNotFound, "not_found")
}

func TestDevTokenSignsInAnyUser(t *testing.T) {
	t.Parallel()
	_, b := setupWith(t, setupOpts{configure: withDevTokens})

	res := b.do(t, req{method: http.MethodPost, path: "/dev/token", body: []byte(`{"user_id": 7}`)})
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.body)
	requireJSON(t, res)
	require.Equal(t, "no-store", res.header.Get("Cache-Control"))
	got := decodeStrict[struct {
		Token  string `json:"token"`
		UserID int64  `json:"user_id"`
	}](t, res.body)
	require.Equal(t, int64(7), got.UserID)

	// The token is an ordinary one, for user 7.
	posted := b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body": "hi"}`), auth: "Bearer " + got.Token})
	require.Equal(t, http.StatusCreated, posted.status, "body: %s", posted.body)
	require.Equal(t, int64(7), decodeStrict[apiPost](t, posted.body).AuthorID)
}

func TestDevTokenRefusesWhatIsNotAUserID(t *testing.T) {
	t.Parallel()
	_, b := setupWith(t, setupOpts{configure: withDevTokens})
	for _, tc := range []struct {
		body string
		code string
	}{
		{`{}`, "invalid_argument"},
		{`{"user_id": null}`, "invalid_argument"},
		{`{"user_id": 0}`, "invalid_argument"},
		{`{"user_id": -3}`, "invalid_argument"},
		{`{"user_id": "7"}`, "invalid_json"},
		{`{"user_id": 1.5}`, "invalid_json"},
		{`{"user_id": 99999999999999999999}`, "invalid_json"},
		{`{"user_id": 7, "admin": true}`, "invalid_json"},
		{`{"User_id": 7}`, "invalid_json"},
		{`[7]`, "invalid_json"},
		{`not json`, "invalid_json"},
	} {
		t.Run(tc.body, func(t *testing.T) {
			res := b.do(t, req{method: http.MethodPost, path: "/dev/token", body: []byte(tc.body)})
			requireError(t, res, http.StatusBadRequest, tc.code)
		})
	}
	res := b.do(t, req{method: http.MethodGet, path: "/dev/token"})
	requireError(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
}

// fakeApp answers every path it serves with the path, to show that it,
// not the API, answered; with the headers docs/openapi.yaml describes for
// the app's answers, which every answer is checked against.
type fakeApp struct{ paths []string }

func (a fakeApp) Paths() []string { return a.paths }

func (a fakeApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	contentType := "text/plain"
	if r.URL.Path == "/" {
		contentType = "text/html"
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("ETag", `"fake"`)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write([]byte("app:" + r.URL.Path))
}

func TestAppIsServedAtItsPathsOnly(t *testing.T) {
	t.Parallel()
	app := fakeApp{paths: []string{"/", "/assets/app.js"}}
	_, b := setupWith(t, setupOpts{configure: func(cfg *api.Config) { cfg.App = app }})

	for _, p := range app.paths {
		res := b.do(t, req{method: http.MethodGet, path: p}) // no token: the app is open
		require.Equal(t, http.StatusOK, res.status, p)
		require.Equal(t, "app:"+p, string(res.body))
		head := b.do(t, req{method: http.MethodHead, path: p})
		require.Equal(t, http.StatusOK, head.status, p)
	}
	for _, p := range []string{"/assets/other.js", "/assets/", "/index.html"} {
		requireError(t, b.do(t, req{method: http.MethodGet, path: p}), http.StatusNotFound, "not_found")
	}
	requireError(t, b.do(t, req{method: http.MethodPost, path: "/", body: []byte(`{}`)}), http.StatusMethodNotAllowed, "method_not_allowed")

	// The API is as it was: authenticated.
	requireError(t, b.do(t, req{method: http.MethodGet, path: "/v1/feed"}), http.StatusUnauthorized, "unauthenticated")
	require.Equal(t, http.StatusOK, b.get(t, 1, "/v1/users/"+strconv.Itoa(1)+"/posts").status)
}
