// Package web is newsfeed's web app: a page and its scripts, styles and icon,
// built into the binary with go:embed and served by `serve` and `all` at `/`
// without authentication (the API that the page calls authenticates every
// request itself). It is plain HTML, CSS and JavaScript modules: no build
// step, no framework, nothing fetched from elsewhere.
//
// The page is rendered once, when the handler is made, with what the server
// knows and the page cannot ask: whether it runs with --dev (then the page
// offers to sign in by user id through POST /dev/token), and the longest
// post the API accepts (posts.max_chars), which the page counts down to.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/newsfeed/newsfeed/internal/static"
)

// files are the page, a template, and the files it loads.
//
//go:embed static
var files embed.FS

// AssetsPrefix is where the page's files are served: /assets/app.js.
const AssetsPrefix = "/assets/"

// indexFile is the page, a template; every other file is served as it is.
const indexFile = "index.html"

var indexTemplate = template.Must(template.ParseFS(files, "static/"+indexFile))

// DefaultMaxChars is Config.MaxChars when unset: the API's default
// posts.max_chars.
const DefaultMaxChars = 1000

// Config says what the page is rendered with.
type Config struct {
	// Dev offers signing in by user id (POST /dev/token), which exists only
	// with --dev. Defaults to false: the page asks for a token.
	Dev bool
	// MaxChars is the longest post body the API accepts, in characters
	// (posts.max_chars): the page counts what is written against it.
	// Defaults to DefaultMaxChars (1000).
	MaxChars int
}

// App serves the page at / and its files under AssetsPrefix.
type App struct {
	files map[string]file // by request path
	paths []string
}

// file is one response, ready to send.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// New renders the page and indexes the files.
func New(cfg Config) *App {
	a := &App{files: map[string]file{}}
	if cfg.MaxChars <= 0 {
		cfg.MaxChars = DefaultMaxChars
	}
	var page bytes.Buffer
	if err := indexTemplate.Execute(&page, cfg); err != nil {
		panic("web: render " + indexFile + ": " + err.Error()) // a bug in the embedded template, caught by any test
	}
	a.add("/", page.Bytes(), static.ContentType(indexFile))
	err := fs.WalkDir(files, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Base(name) == indexFile {
			return err
		}
		body, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		a.add(AssetsPrefix+strings.TrimPrefix(name, "static/"), body, static.ContentType(name))
		return nil
	})
	if err != nil {
		panic("web: read the embedded files: " + err.Error()) // embedded: cannot fail but by a bug
	}
	slices.Sort(a.paths)
	return a
}

func (a *App) add(urlPath string, body []byte, contentType string) {
	sum := sha256.Sum256(body)
	a.files[urlPath] = file{body: body, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	a.paths = append(a.paths, urlPath)
}

// Paths lists every path App serves, "/" first: the API routes exactly
// these to it, so that any other path keeps the API's 404.
func (a *App) Paths() []string { return slices.Clone(a.paths) }

// contentSecurityPolicy lets the page load its own files and call its own
// origin, and nothing else: no inline script or style, no frames. Every
// text the page shows from the API goes in through textContent, and this
// is the second line behind it.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP answers GET and HEAD for the paths App serves, with an ETag
// (the content's hash) so that a browser revalidates cheaply, and 404 for
// any other path.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, ok := a.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	// A browser revalidates on every load (no-cache): a new binary serves
	// new files under the same names, and a 304 costs a round trip and no
	// body.
	w.Header().Set("ETag", f.etag)
	static.Serve(w, r, f.body, f.contentType, contentSecurityPolicy)
}
