package api_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/web"
)

// signed signs claims with method and key.
func signed(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	require.NoError(t, err)
	return s
}

func TestAuthRejected(t *testing.T) {
	t.Parallel()
	_, b := setup(t)

	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Minute).Unix()
	hs256 := func(claims jwt.MapClaims) string { return signed(t, jwt.SigningMethodHS256, testSecret, claims) }
	valid := b.token(t, 1)

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)

	// A valid token whose payload was changed afterwards (sub 1 → 2).
	parts := strings.Split(valid, ".")
	require.Len(t, parts, 3)
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	tamperedPayload := strings.Replace(string(payload), `"sub":"1"`, `"sub":"2"`, 1)
	require.NotEqual(t, string(payload), tamperedPayload)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(tamperedPayload)) + "." + parts[2]

	for _, tc := range []struct {
		name, header string
	}{
		{"missing header", ""},
		{"Basic scheme", "Basic dXNlcjpwYXNz"},
		{"Basic scheme with a valid token", "Basic " + valid},
		{"token without scheme", valid},
		{"Bearer without token", "Bearer"},
		{"Bearer with blank token", "Bearer    "},
		{"malformed token", "Bearer abc"},
		{"malformed three parts", "Bearer a.b.c"},
		{"truncated token", "Bearer " + valid[:len(valid)-5]},
		{"signature removed", "Bearer " + parts[0] + "." + parts[1] + "."},
		{"tampered payload", "Bearer " + tampered},
		{"another secret", "Bearer " + signed(t, jwt.SigningMethodHS256, []byte("another-secret"), jwt.MapClaims{"sub": "1", "exp": future})},
		{"expired", "Bearer " + hs256(jwt.MapClaims{"sub": "1", "exp": past})},
		{"without exp", "Bearer " + hs256(jwt.MapClaims{"sub": "1"})},
		{"exp not a number", "Bearer " + hs256(jwt.MapClaims{"sub": "1", "exp": "tomorrow"})},
		{"sub not a number", "Bearer " + hs256(jwt.MapClaims{"sub": "abc", "exp": future})},
		{"sub zero", "Bearer " + hs256(jwt.MapClaims{"sub": "0", "exp": future})},
		{"sub negative", "Bearer " + hs256(jwt.MapClaims{"sub": "-1", "exp": future})},
		{"sub fractional", "Bearer " + hs256(jwt.MapClaims{"sub": "1.5", "exp": future})},
		{"sub overflowing", "Bearer " + hs256(jwt.MapClaims{"sub": "9223372036854775808", "exp": future})},
		{"sub empty", "Bearer " + hs256(jwt.MapClaims{"sub": "", "exp": future})},
		{"sub missing", "Bearer " + hs256(jwt.MapClaims{"exp": future})},
		{"sub a JSON number", "Bearer " + hs256(jwt.MapClaims{"sub": 1, "exp": future})},
		{"alg none", "Bearer " + signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "1", "exp": future})},
		{"alg HS512", "Bearer " + signed(t, jwt.SigningMethodHS512, testSecret, jwt.MapClaims{"sub": "1", "exp": future})},
		{"alg HS384", "Bearer " + signed(t, jwt.SigningMethodHS384, testSecret, jwt.MapClaims{"sub": "1", "exp": future})},
		{"alg RS256", "Bearer " + signed(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "1", "exp": future})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, r := range []req{
				{method: http.MethodGet, path: "/v1/feed"},
				{method: http.MethodGet, path: "/v1/posts/1"},
				{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body": "x"}`)},
				{method: http.MethodPut, path: "/v1/following/5"},
				{method: http.MethodDelete, path: "/v1/following/5"},
				{method: http.MethodGet, path: "/v1/users/1/followers"},
				// Bad input behind a bad token: authentication comes first.
				{method: http.MethodGet, path: "/v1/posts/abc"},
				{method: http.MethodPost, path: "/v1/posts", body: []byte(`not json`)},
			} {
				r.auth = tc.header // "" sends no Authorization header
				res := b.do(t, r)
				requireError(t, res, http.StatusUnauthorized, "unauthenticated")
			}
		})
	}
	t.Cleanup(func() {
		if !t.Failed() {
			require.Equal(t, state{}, b.state(t), "nothing written by unauthenticated requests")
		}
	})
}

func TestAuthAccepted(t *testing.T) {
	t.Parallel()
	_, b := setup(t)

	future := time.Now().Add(time.Hour).Unix()
	issued, err := api.IssueToken(testSecret, 42, time.Hour) // parallel subtests may run minutes later
	require.NoError(t, err)

	for _, tc := range []struct{ name, header string }{
		{"IssueToken", "Bearer " + issued},
		{"lower-case scheme", "bearer " + issued},
		{"hand-made HS256 token", "Bearer " + signed(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "42", "exp": future})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := b.do(t, req{method: http.MethodGet, path: "/v1/feed", auth: tc.header})
			require.Equal(t, http.StatusOK, res.status, "body: %s", res.body)
		})
	}

	t.Run("the token's sub is the author", func(t *testing.T) {
		t.Parallel()
		res := b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body": "mine"}`),
			auth: "Bearer " + signed(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "9007199254740993", "exp": future})})
		require.Equal(t, http.StatusCreated, res.status, "body: %s", res.body)
		require.Contains(t, string(res.body), `"author_id":9007199254740993`, "int64 ids are exact JSON numbers")
	})
}

func TestIssueToken(t *testing.T) {
	t.Parallel()

	_, err := api.IssueToken(testSecret, 0, time.Hour)
	require.Error(t, err)
	_, err = api.IssueToken(testSecret, 1, 0)
	require.Error(t, err)

	tok, err := api.IssueToken(testSecret, 7, time.Hour)
	require.NoError(t, err)
	var claims jwt.RegisteredClaims
	parsed, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return testSecret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
	require.NoError(t, err)
	require.True(t, parsed.Valid)
	require.Equal(t, "7", claims.Subject)
	require.WithinDuration(t, time.Now().Add(time.Hour), claims.ExpiresAt.Time, time.Minute)
}

// The access_token query parameter is the stream's alone (browsers'
// EventSource cannot set headers): every other route that wants a token
// refuses one given that way, as if none were given. The routes are the
// API's own, so that a route added later is held to it too.
func TestAccessTokenOnlyOnTheStream(t *testing.T) {
	t.Parallel()
	sub := &fakeSub{events: make(chan domain.LiveEvent), gone: make(chan struct{})}
	e, b := setupWith(t, setupOpts{configure: func(c *api.Config) {
		c.Live, c.App, c.DevTokens = fakeLive{sub}, web.New(web.Config{Dev: true}), true
	}})
	query := "access_token=" + b.token(t, 1)

	var refused []string
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound { // a 404 below a route (routing.NoDeeperPaths)
			continue
		}
		path := strings.ReplaceAll(echoParam.ReplaceAllString(r.Path, "1"), "*", "x")
		route := r.Method + " " + r.Path
		if route == http.MethodGet+" /v1/feed/stream" {
			continue // below
		}
		without := b.do(t, req{method: r.Method, path: path})
		if without.status != http.StatusUnauthorized {
			require.False(t, strings.HasPrefix(r.Path, "/v1/"), "%s answers %d without a token: every /v1 route wants one", route, without.status)
			continue // open to all: the web app, the description, the development token
		}
		res := b.do(t, req{method: r.Method, path: path + "?" + query})
		requireError(t, res, http.StatusUnauthorized, "unauthenticated")
		refused = append(refused, route)
	}
	require.Contains(t, refused, "GET /v1/feed")
	require.Contains(t, refused, "POST /v1/posts")

	// The same token in the same place opens the stream: it was valid.
	srv := &liveSystem{servers: []*httptest.Server{b.srv}}
	srv.openStream(t, 0, 1, query, nil)
}
