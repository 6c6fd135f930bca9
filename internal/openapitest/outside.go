package openapitest

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// checkNoPath checks the answer to a path no operation has.
func (s *Spec) checkNoPath(x Exchange) []string {
	if x.Status >= 200 && x.Status < 400 || x.Status == http.StatusMethodNotAllowed {
		return []string{fmt.Sprintf("no path of %s matches %s, but the API answered %d: describe the route in %s",
			File, x.Request.URL.Path, x.Status, File)}
	}
	return s.checkOutside(x, http.StatusNotFound, http.StatusRequestEntityTooLarge,
		http.StatusRequestHeaderFieldsTooLarge, http.StatusInternalServerError)
}

// checkNoOperation checks the answer to a method a path has no operation
// for: 405, or 204 to OPTIONS, with an Allow header of the path's methods.
func (s *Spec) checkNoOperation(x Exchange, path string) []string {
	allowed := s.methodsOf(path)
	if x.Status >= 200 && x.Status < 300 && x.Request.Method != http.MethodOptions || x.Status == http.StatusNotFound {
		return []string{fmt.Sprintf("%s has no %s operation on %s (only %s), but the API answered %d: describe it in %s",
			File, x.Request.Method, path, strings.Join(allowed, ", "), x.Status, File)}
	}
	if x.Request.Method == http.MethodOptions && x.Status == http.StatusNoContent ||
		x.Status == http.StatusMethodNotAllowed {
		want := append(slices.Clone(allowed), http.MethodOptions)
		slices.Sort(want)
		var got []string
		for _, m := range strings.Split(x.Header.Get("Allow"), ",") {
			if m = strings.TrimSpace(m); m != "" {
				got = append(got, m)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return []string{fmt.Sprintf("%s on %s: the API's Allow header %q is not the methods %s describes for %s, %s",
				x.Request.Method, path, x.Header.Get("Allow"), File, path, strings.Join(want, ", "))}
		}
		if x.Status == http.StatusNoContent {
			return nil
		}
	}
	return s.checkOutside(x, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge,
		http.StatusRequestHeaderFieldsTooLarge, http.StatusInternalServerError)
}

// checkOutside checks an answer given before any operation: its status must
// be one of want, and it must be that status's component response.
func (s *Spec) checkOutside(x Exchange, want ...int) []string {
	if !slices.Contains(want, x.Status) {
		return []string{fmt.Sprintf("%s %s reaches no operation of %s, where the answers are %v, not %d",
			x.Request.Method, x.Request.URL.Path, File, want, x.Status)}
	}
	what := fmt.Sprintf("response %d (components.responses in %s)", x.Status, File)
	resp := s.outside[x.Status]
	var problems []string
	for _, name := range sortedKeys(resp.Headers) {
		if h := resp.Headers[name]; h.Value != nil && h.Value.Required && x.Header.Get(name) == "" {
			problems = append(problems, fmt.Sprintf("%s: the required header %s is missing", what, name))
		}
	}
	return append(problems, s.checkContent(what, resp, x)...)
}
