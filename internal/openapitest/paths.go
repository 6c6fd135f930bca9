package openapitest

import (
	"net/http"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/newsfeed/newsfeed/internal/routing"
)

// paths reads a request's path the way the API's router reads it: it is
// echo's own router, given the description's paths and methods and the rule
// the API adds (routing.NoDeeperPaths). So a path the API routes in a way no
// rule of thumb foresees — a parameter in the middle may be empty, a wrong
// method on a matched path is 405, OPTIONS lists its methods — is routed
// here alike, and the API is checked against the operation it really ran
// (or the path it answered 405 for), with the parameter values it really
// got. A route the API has and the description lacks is found by no path
// here, and its 2xx or 405 is reported as drift.
type paths struct {
	router *echo.Router
	// specPath maps an echo route ("/v1/posts/:id") to the description's
	// path ("/v1/posts/{id}").
	specPath map[string]string
}

func newPaths(doc *openapi3.T) *paths {
	e := echo.New()
	p := &paths{router: e.Router(), specPath: map[string]string{}}
	noop := func(echo.Context) error { return nil }
	for path, item := range doc.Paths.Map() {
		route := echoRoute(path)
		p.specPath[route] = path
		for method := range item.Operations() {
			e.Add(method, route, noop)
		}
	}
	routing.NoDeeperPaths(e)
	return p
}

// echoRoute spells a description's path as an echo route: {name} → :name.
func echoRoute(path string) string {
	segments := strings.Split(path, "/")
	for i, s := range segments {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			segments[i] = ":" + s[1:len(s)-1]
		}
	}
	return strings.Join(segments, "/")
}

// match is what the router made of a request.
type match struct {
	// path is the description's path the request reached, "" for none.
	path string
	// params are the path parameters, as the API's handlers get them (raw).
	params map[string]string
}

// find routes method and the request's path (escaped, as echo reads it).
func (p *paths) find(req *http.Request) match {
	c := echo.New().NewContext(nil, nil)
	p.router.Find(req.Method, echo.GetPath(req), c)
	m := match{path: p.specPath[c.Path()], params: map[string]string{}}
	values := c.ParamValues()
	for i, name := range c.ParamNames() {
		if i < len(values) {
			m.params[name] = values[i]
		}
	}
	return m
}

// methods lists the methods the description has for the path, sorted.
func (s *Spec) methodsOf(path string) []string {
	var allowed []string
	if item := s.doc.Paths.Value(path); item != nil {
		for m := range item.Operations() {
			allowed = append(allowed, m)
		}
	}
	slices.Sort(allowed)
	return allowed
}
