package admin

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/newsfeed/newsfeed/internal/static"
)

// files are the console's page and the files it loads.
//
//go:embed static
var files embed.FS

// contentSecurityPolicy lets the page load its own files and call its own
// origin, and nothing else: no inline script or style, no frames, no CDN.
// Everything the page shows from the API goes in through textContent; this
// is the second line behind it.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// page serves the console's page. It holds nothing secret: the API behind
// it asks for the token.
func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	serveStatic(w, r, "index.html")
}

// asset serves one of the page's files, or 404.
func (c *Console) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "index.html" || !fs.ValidPath(name) {
		writeError(w, http.StatusNotFound, "not_found", "no such file: "+r.URL.Path)
		return
	}
	if _, err := fs.Stat(files, "static/"+name); err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such file: "+r.URL.Path)
		return
	}
	serveStatic(w, r, name)
}

// serveStatic sends an embedded file with the headers every file of the
// console has (static.Serve).
func serveStatic(w http.ResponseWriter, r *http.Request, name string) {
	body, err := files.ReadFile("static/" + name)
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such file: "+r.URL.Path)
		return
	}
	static.Serve(w, r, body, static.ContentType(name), contentSecurityPolicy)
}
