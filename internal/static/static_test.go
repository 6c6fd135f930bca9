package static_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/static"
)

func TestContentType(t *testing.T) {
	for name, want := range map[string]string{
		"index.html":  "text/html; charset=utf-8",
		"app.js":      "text/javascript; charset=utf-8",
		"style.css":   "text/css; charset=utf-8",
		"icon.svg":    "image/svg+xml",
		"icon.png":    "image/png",
		"no-type.zzz": "application/octet-stream",
	} {
		require.Equal(t, want, static.ContentType(name), name)
	}
}

func serve(method, etag string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "/f.js", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	if etag != "" {
		rec.Header().Set("ETag", etag)
	}
	static.Serve(rec, req, []byte("let a = 1;"), "text/javascript; charset=utf-8", "default-src 'none'")
	return rec
}

func TestServe(t *testing.T) {
	res := serve(http.MethodGet, "")
	require.Equal(t, http.StatusOK, res.Code)
	require.Equal(t, "let a = 1;", res.Body.String())
	for k, v := range map[string]string{
		"Content-Type":            "text/javascript; charset=utf-8",
		"Cache-Control":           "no-cache",
		"Content-Security-Policy": "default-src 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"X-Frame-Options":         "DENY",
	} {
		require.Equal(t, v, res.Header().Get(k), k)
	}

	head := serve(http.MethodHead, "")
	require.Equal(t, http.StatusOK, head.Code)
	require.Empty(t, head.Body.String())

	// With the caller's ETag, a browser's revalidation costs no body.
	again := serve(http.MethodGet, `"abc"`, "If-None-Match", `"abc"`)
	require.Equal(t, http.StatusNotModified, again.Code)
	require.Empty(t, again.Body.String())
	changed := serve(http.MethodGet, `"def"`, "If-None-Match", `"abc"`)
	require.Equal(t, http.StatusOK, changed.Code)
}
