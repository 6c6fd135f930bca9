package admin

import (
	"bytes"
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"time"
)

//go:embed static
var static embed.FS

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
	if _, err := fs.Stat(static, "static/"+name); err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such file: "+r.URL.Path)
		return
	}
	serveStatic(w, r, name)
}

// serveStatic sends an embedded file with the headers every file of the
// console has. The files change only with the binary: no-cache makes a
// browser ask again, and ServeContent answers what it can.
func serveStatic(w http.ResponseWriter, r *http.Request, name string) {
	body, err := static.ReadFile("static/" + name)
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such file: "+r.URL.Path)
		return
	}
	h := w.Header()
	h.Set("Content-Type", contentType(name))
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// contentType is a file's type by its extension, said here so that a
// machine's /etc/mime.types cannot change it.
func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}
