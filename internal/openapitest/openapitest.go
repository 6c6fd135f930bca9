// Package openapitest holds the API to its description, docs/openapi.yaml:
// it checks one exchange — the request a test sent and the answer the API
// gave — and says exactly what drifted (which route, which status, which
// header or field). The API's tests, and the e2e tests of the binary, send
// every request through it, so a route, a status or a field the description
// lacks, or describes otherwise, fails a test.
//
// The API's own router, echo's, given the description's paths, finds the
// operation a request reached (paths.go); kin-openapi checks the
// request's parameters and token, and the response's status, headers and
// Content-Type (openapi3filter). Bodies are checked against their schemas by
// the JSON Schema 2020-12 validator kin-openapi itself uses for OpenAPI 3.1
// (santhosh-tekuri/jsonschema), each schema compiled once: kin-openapi
// compiles it again on every call, 5 ms an answer (bodies.go).
//
// What a request may get, beyond the operations' own responses:
//   - a path no operation has: 404 not_found (or 413 too_large: the body limit
//     runs on every request);
//   - a method the path has no operation for: 405 method_not_allowed with an
//     Allow header naming exactly the path's methods, or for OPTIONS 204 with
//     that header;
//   - a request the description refuses (a parameter out of its schema, no
//     token where its security wants one — a bearer token, or the stream's
//     access_token query parameter —, a body that is not its schema) must
//     not be accepted: a 2xx to it is drift.
//
// The API does not read the request's Content-Type (docs/openapi.yaml says
// so), so a request body is checked as the JSON it is read as.
package openapitest

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"

	"github.com/newsfeed/newsfeed/docs"
)

// File is where the description lives, for messages.
const File = "docs/openapi.yaml"

// Spec is the loaded description. It is safe for concurrent use.
type Spec struct {
	doc   *openapi3.T
	paths *paths
	// outside lists the responses any request may get before it reaches an
	// operation, by status: the components of the same names.
	outside map[int]*openapi3.Response
	bodies  *bodySchemas
}

// Exchange is one request and the answer the API gave it.
type Exchange struct {
	// Request is the request as sent: method, URL (path and query) and
	// header. Its Body is not read; the body sent is RequestBody.
	Request     *http.Request
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
}

var (
	loadOnce sync.Once
	loaded   *Spec
	errLoad  error
)

// Load returns the description embedded by package docs, parsed and
// validated once per process.
func Load() (*Spec, error) {
	loadOnce.Do(func() { loaded, errLoad = Parse(docs.OpenAPI) })
	return loaded, errLoad
}

// Parse parses and validates a description (Load's, or another for tests of
// this package).
func Parse(raw []byte) (*Spec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", File, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", File, err)
	}
	bodies, err := newBodySchemas(doc)
	if err != nil {
		return nil, err
	}
	s := &Spec{doc: doc, paths: newPaths(doc), outside: map[int]*openapi3.Response{}, bodies: bodies}
	for status, name := range map[int]string{
		http.StatusNotFound:                    "NotFound",
		http.StatusMethodNotAllowed:            "MethodNotAllowed",
		http.StatusRequestEntityTooLarge:       "TooLarge",
		http.StatusRequestHeaderFieldsTooLarge: "HeadersTooLarge",
		http.StatusInternalServerError:         "Internal",
	} {
		ref := doc.Components.Responses[name]
		if ref == nil || ref.Value == nil {
			return nil, fmt.Errorf("%s has no components.responses.%s, the answer to any request with status %d", File, name, status)
		}
		s.outside[status] = ref.Value
	}
	return s, nil
}

// Check returns nil when the description allows the exchange, else an error
// that names the request, the answer, the operation and what drifted.
func (s *Spec) Check(x Exchange) error {
	problems := s.check(x)
	if len(problems) == 0 {
		return nil
	}
	target := x.Request.URL.RequestURI()
	if len(target) > 200 {
		target = target[:200] + "…"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s and the API disagree: %s %s answered %d", File, x.Request.Method, target, x.Status)
	for _, p := range problems {
		b.WriteString("\n  - " + strings.ReplaceAll(p, "\n", "\n    "))
	}
	fmt.Fprintf(&b, "\n  response body: %.400q", x.Body)
	return errors.New(b.String())
}

// check finds what the exchange reached — an operation, a path without the
// method, or no path — as the API's router does (paths.go), and checks it as
// such.
func (s *Spec) check(x Exchange) []string {
	req := requestFor(x)
	m := s.paths.find(req)
	if m.path == "" {
		return s.checkNoPath(x)
	}
	item := s.doc.Paths.Value(m.path)
	op := item.GetOperation(req.Method)
	if op == nil {
		return s.checkNoOperation(x, m.path)
	}
	// The validator does not refuse an empty path parameter by itself
	// (GET /v1/users//posts runs the route with an empty id).
	var refused []error
	for _, name := range sortedKeys(m.params) {
		if m.params[name] == "" {
			refused = append(refused, fmt.Errorf("the path parameter %s is empty", name))
		}
	}
	route := &routers.Route{Spec: s.doc, Path: m.path, PathItem: item, Method: req.Method, Operation: op}
	return s.checkOperation(x, req, route, m.params, errors.Join(refused...))
}
