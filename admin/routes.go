package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// routes maps every path under Path. Paths are registered without a
// method, and each handler says which it answers (only), so that a wrong
// method gets 405 in the project's error shape rather than the mux's text.
func (c *Console) routes() http.Handler {
	api := http.NewServeMux()
	api.Handle(Path+"/api/overview", only(http.MethodGet, c.overview))
	api.Handle(Path+"/api/outbox", only(http.MethodGet, c.outboxCounts))
	api.Handle(Path+"/api/outbox/dead", only(http.MethodGet, c.deadEvents))
	api.Handle(Path+"/api/outbox/dead/{id}/retry", only(http.MethodPost, c.retryDead))
	api.Handle(Path+"/api/queue", only(http.MethodGet, c.queuePartitions))
	api.Handle(Path+"/api/metrics", only(http.MethodGet, c.metricSamples))
	api.Handle(Path+"/api/config", only(http.MethodGet, c.settings))
	api.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such route: "+r.URL.Path)
	})

	mux := http.NewServeMux()
	mux.Handle(Path, only(http.MethodGet, c.page))
	mux.HandleFunc(Path+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Path, http.StatusMovedPermanently)
	})
	mux.Handle(Path+"/assets/{file}", only(http.MethodGet, c.asset))
	mux.Handle(Path+"/api/", c.authenticate(api))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such route: "+r.URL.Path)
	})
	return c.unlessOff(mux)
}

// unlessOff answers every request with 403 while the console is off, with
// a message that says how to turn it on.
func (c *Console) unlessOff(next http.Handler) http.Handler {
	if c.Mode() != "off" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusForbidden, "forbidden",
			"the operator console is off: admin.token is not set; set it (NEWSFEED_ADMIN_TOKEN) to turn it on, or run with --dev")
	})
}

// authenticate lets through a request whose bearer token is admin.token,
// or every request of an open console.
func (c *Console) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.Mode() == "open" {
			next.ServeHTTP(w, r)
			return
		}
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		token = strings.TrimSpace(token)
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="newsfeed-admin"`)
			writeError(w, http.StatusUnauthorized, "unauthenticated",
				"the operator console needs admin.token as a bearer token (Authorization: Bearer …)")
			return
		}
		// Hashing first makes both sides one length: the comparison takes
		// the same time whatever the token, its length included.
		sum := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(sum[:], c.tokenHash[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="newsfeed-admin", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "unauthenticated", "the token is not admin.token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// only answers method (and HEAD with GET) with h, and any other method with
// 405 and Allow.
func only(method string, h http.HandlerFunc) http.Handler {
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
			h(w, r)
			return
		}
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed here: "+allow)
	})
}

// writeJSON sends v as the body. Nothing the API answers is cached: it is
// the state of the system now.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// errorBody is the project's error shape: {"error": {"code", "message"}}.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var body errorBody
	body.Error.Code, body.Error.Message = code, message
	writeJSON(w, status, body)
}

// unavailable answers 503 for a dependency that failed, naming it: the
// operator reading the console is the one who needs the cause.
func unavailable(w http.ResponseWriter, dependency string, err error) {
	writeError(w, http.StatusServiceUnavailable, "unavailable", dependency+" is unavailable: "+err.Error())
}
