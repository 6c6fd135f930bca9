package web_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/web"
)

func get(t *testing.T, h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestServesThePageAndItsFiles(t *testing.T) {
	app := web.New(web.Config{})
	paths := app.Paths()
	require.Equal(t, "/", paths[0], "the page first")
	for _, want := range []string{"/assets/app.js", "/assets/style.css", "/assets/icon.svg"} {
		require.Contains(t, paths, want)
	}
	require.NotContains(t, paths, "/assets/index.html", "the page is served at / only")

	types := map[string]string{
		".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
	}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			res := get(t, app, http.MethodGet, p)
			require.Equal(t, http.StatusOK, res.Code)
			require.NotEmpty(t, res.Body.Bytes())
			if p == "/" {
				require.Equal(t, "text/html; charset=utf-8", res.Header().Get("Content-Type"))
			} else {
				require.Equal(t, types[path.Ext(p)], res.Header().Get("Content-Type"))
			}
			require.Equal(t, "nosniff", res.Header().Get("X-Content-Type-Options"))
			require.Contains(t, res.Header().Get("Content-Security-Policy"), "default-src 'none'")
			require.Equal(t, "no-cache", res.Header().Get("Cache-Control"))

			etag := res.Header().Get("ETag")
			require.Regexp(t, `^"[0-9a-f]{16}"$`, etag)
			again := get(t, app, http.MethodGet, p, "If-None-Match", etag)
			require.Equal(t, http.StatusNotModified, again.Code, "a browser's revalidation costs no body")
			require.Empty(t, again.Body.Bytes())

			head := get(t, app, http.MethodHead, p)
			require.Equal(t, http.StatusOK, head.Code)
			require.Empty(t, head.Body.Bytes())
		})
	}
}

func TestUnknownPathIsNotFound(t *testing.T) {
	app := web.New(web.Config{})
	for _, p := range []string{"/assets/", "/assets/nope.js", "/index.html", "/assets/../web.go", "/nope"} {
		require.Equal(t, http.StatusNotFound, get(t, app, http.MethodGet, p).Code, p)
		require.NotContains(t, app.Paths(), p)
	}
}

func TestThePageSaysWhetherDevSignInExists(t *testing.T) {
	for _, dev := range []bool{false, true} {
		body := get(t, web.New(web.Config{Dev: dev}), http.MethodGet, "/").Body.String()
		if dev {
			require.Contains(t, body, `<body data-dev="true" `)
		} else {
			require.Contains(t, body, `<body data-dev="false" `)
		}
	}
	require.NotEqual(t,
		get(t, web.New(web.Config{Dev: true}), http.MethodGet, "/").Header().Get("ETag"),
		get(t, web.New(web.Config{}), http.MethodGet, "/").Header().Get("ETag"),
		"two pages, two ETags")
}

// The page counts a post's characters against the API's limit, which only
// the server knows (posts.max_chars).
func TestThePageKnowsTheLongestPost(t *testing.T) {
	body := get(t, web.New(web.Config{}), http.MethodGet, "/").Body.String()
	require.Contains(t, body, `data-max-chars="1000"`, "the API's default")
	body = get(t, web.New(web.Config{MaxChars: 280}), http.MethodGet, "/").Body.String()
	require.Contains(t, body, `data-max-chars="280"`)
}

// Every file the page and its modules name is one the app serves: a typo
// would otherwise show only in a browser, as a page that does nothing.
func TestEveryReferencedFileIsServed(t *testing.T) {
	app := web.New(web.Config{})
	served := app.Paths()
	page := get(t, app, http.MethodGet, "/").Body.String()
	refs := regexp.MustCompile(`(?:src|href)="(/[^"]*)"`).FindAllStringSubmatch(page, -1)
	require.NotEmpty(t, refs)
	for _, m := range refs {
		require.Contains(t, served, m[1], "index.html names %s", m[1])
	}

	imports := regexp.MustCompile(`(?m)^import .* from '\./([^']+)';$`)
	modules, imported := 0, 0
	for _, p := range served {
		if !strings.HasSuffix(p, ".js") {
			continue
		}
		modules++
		src := get(t, app, http.MethodGet, p).Body.String()
		for _, m := range imports.FindAllStringSubmatch(src, -1) {
			require.Contains(t, served, web.AssetsPrefix+m[1], "%s imports ./%s", p, m[1])
			imported++
		}
	}
	require.GreaterOrEqual(t, modules, 2)
	require.Positive(t, imported, "the pattern finds the imports")
}

// The page's text from the API goes in as text, never as markup: no
// module may use the DOM's HTML parsers, which would turn a post's body
// into elements (the Content-Security-Policy is the second line).
func TestNoModuleParsesHTML(t *testing.T) {
	app := web.New(web.Config{})
	banned := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function`)
	for _, p := range app.Paths() {
		if !strings.HasSuffix(p, ".js") {
			continue
		}
		body, err := io.ReadAll(get(t, app, http.MethodGet, p).Body)
		require.NoError(t, err)
		require.Empty(t, banned.FindAllString(string(body), -1), p)
	}
}

// The embedded files are the files of the static directory, all of them.
func TestEmbedsTheStaticDirectory(t *testing.T) {
	var onDisk []string
	require.NoError(t, fs.WalkDir(os.DirFS("static"), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && p != "index.html" {
			onDisk = append(onDisk, web.AssetsPrefix+p)
		}
		return err
	}))
	served := web.New(web.Config{}).Paths()
	require.Equal(t, "/", served[0])
	slices.Sort(onDisk)
	require.Equal(t, onDisk, served[1:])
}
