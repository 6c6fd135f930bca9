// Package static sends the files that the web app (web) and the operator
// console (admin) embed: the content type of each, said here so that a
// machine's /etc/mime.types cannot change it, and the headers every one of
// them carries. Each app keeps its own files, embedded in its own package,
// and its own Content-Security-Policy; this package holds no file.
package static

import (
	"bytes"
	"mime"
	"net/http"
	"path"
	"time"
)

// ContentType is the type of a file by its extension: the few the apps
// have are known to every system's table, but are said anyway.
func ContentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// Serve answers r with body, of contentType, under the page's
// Content-Security-Policy csp. The files change only with the binary:
// no-cache makes a browser ask again on every load, and an ETag the caller
// set beforehand turns that into a 304 without a body. The other headers
// keep the file from being sniffed, framed or named in a Referer.
func Serve(w http.ResponseWriter, r *http.Request, body []byte, contentType, csp string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}
