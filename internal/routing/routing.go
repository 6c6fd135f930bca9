// Package routing holds the one rule the API adds to echo's router, shared by
// the API and by the check that holds it to docs/openapi.yaml
// (internal/openapitest), so that both read a path alike.
package routing

import (
	"strings"

	"github.com/labstack/echo/v4"
)

// NoDeeperPaths makes a path below a route that ends in a parameter no route
// at all: 404 for every method. Left alone, echo gives such a parameter the
// rest of the path, slashes included, so /v1/following/7/8 ran the route with
// the id "7/8" while a wrong method on it answered 405: one path, two
// meanings. Call it once every route is added; routes added later are not
// covered.
func NoDeeperPaths(e *echo.Echo) {
	seen := map[string]bool{}
	for _, r := range e.Routes() {
		last := r.Path[strings.LastIndexByte(r.Path, '/')+1:]
		if !strings.HasPrefix(last, ":") || seen[r.Path] {
			continue
		}
		seen[r.Path] = true
		e.RouteNotFound(r.Path+"/*", notFound)
	}
}

// notFound answers as echo does when no route matches, and says so to what
// reads the route afterwards (metrics and the access log say "unmatched").
func notFound(c echo.Context) error {
	c.SetPath("")
	return echo.ErrNotFound
}
