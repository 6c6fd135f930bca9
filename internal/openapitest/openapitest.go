// Package openapitest holds the API to its description, docs/openapi.yaml:
// it checks one exchange — the request a test sent and the answer the API
// gave — with kin-openapi's openapi3filter, and says exactly what drifted
// (which route, which status, which header or field). The API's tests send
// every request through it, so a route, a status or a field the description
// lacks, or describes otherwise, fails a test.
//
// What a request may get, beyond the operations' own responses:
//   - a path no operation has: 404 not_found (or 413 too_large: the body limit
//     runs on every request);
//   - a method the path has no operation for: 405 method_not_allowed with an
//     Allow header naming exactly the path's methods, or for OPTIONS 204 with
//     that header;
//   - a request the description refuses (a parameter out of its schema, no
//     bearer token where one is required, a body that is not its schema) must
//     not be accepted: a 2xx to it is drift.
//
// The API does not read the request's Content-Type (docs/openapi.yaml says
// so), so a request body is checked as the JSON it is read as.
package openapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/newsfeed/newsfeed/docs"
)

// File is where the description lives, for messages.
const File = "docs/openapi.yaml"

// Spec is the loaded description. It is safe for concurrent use.
type Spec struct {
	doc    *openapi3.T
	router routers.Router
	// outside lists the responses any request may get before it reaches an
	// operation, by status: the components of the same names.
	outside map[int]*openapi3.Response
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
	// The servers name where `make run` listens; tests listen anywhere.
	// Without servers, the router matches paths alone.
	doc.Servers = nil
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", File, err)
	}
	s := &Spec{doc: doc, router: router, outside: map[int]*openapi3.Response{}}
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

// methods are the methods a path item can have, as net/http spells them.
var methods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, http.MethodTrace, "QUERY",
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

func (s *Spec) check(x Exchange) []string {
	req := s.requestFor(x)
	route, params, err := s.router.FindRoute(req)
	var refused error
	if errors.Is(err, routers.ErrPathNotFound) {
		// A path with an empty segment where a path parameter goes is the
		// route's, with a parameter the description refuses.
		if filled, ok := fillEmptySegments(req); ok {
			if r, p, ferr := s.router.FindRoute(filled); ferr == nil {
				route, params, err = r, p, nil
				refused = errors.New(`a path parameter is empty (checked below as "_")`)
			}
		}
	}
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		return s.checkNoPath(x)
	case errors.Is(err, routers.ErrMethodNotAllowed):
		return s.checkNoOperation(x, req)
	case err != nil:
		return []string{"finding the route: " + err.Error()}
	}
	return s.checkOperation(x, req, route, params, refused)
}

// checkOperation checks an exchange with one of the description's
// operations. refused, when set, is why the description refuses the request
// besides what openapi3filter finds.
func (s *Spec) checkOperation(x Exchange, req *http.Request, route *routers.Route, params map[string]string, refused error) []string {
	op := fmt.Sprintf("operation %s (%s %s)", route.Operation.OperationID, route.Method, route.Path)
	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			MultiError:          true,
			SkipSettingDefaults: true,
			AuthenticationFunc:  bearerGiven,
		},
	}
	var problems []string
	if x.Status == http.StatusMethodNotAllowed {
		// Every operation documents 405 for the path's other methods; for
		// its own, it means the API lacks the route the description has.
		problems = append(problems, fmt.Sprintf("%s is described, but the API answered 405: it has no such route", op))
	}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	if refused != nil {
		reqErr = errors.Join(refused, reqErr)
	}
	if reqErr != nil && x.Status >= 200 && x.Status < 300 {
		problems = append(problems, fmt.Sprintf("%s: the API accepted a request the description refuses: %v", op, reqErr))
	}
	resp := route.Operation.Responses.Status(x.Status)
	if resp == nil || resp.Value == nil {
		return append(problems, fmt.Sprintf("%s documents no response %d (it documents %s): add it where the API answers it",
			op, x.Status, strings.Join(documented(route.Operation), ", ")))
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 x.Status,
		Header:                 x.Header,
		Options:                &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true},
	}
	out.SetBodyBytes(x.Body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		problems = append(problems, fmt.Sprintf("%s, response %d: %v", op, x.Status, err))
	}
	return append(problems, checkBodyPresence(fmt.Sprintf("%s, response %d", op, x.Status), resp.Value, x)...)
}

// requestFor rebuilds the request as the validator reads it: with its body,
// and with the Content-Type the API reads it as.
func (s *Spec) requestFor(x Exchange) *http.Request {
	req := x.Request.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	req.ContentLength = int64(len(x.RequestBody))
	if len(x.RequestBody) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// fillEmptySegments returns req with every empty segment of its path (after
// the first slash) replaced by a placeholder, and whether it had any.
func fillEmptySegments(req *http.Request) (*http.Request, bool) {
	segments := strings.Split(req.URL.EscapedPath(), "/")
	filled := false
	for i := 1; i < len(segments); i++ {
		if segments[i] == "" {
			segments[i], filled = "_", true
		}
	}
	if !filled {
		return nil, false
	}
	r := req.Clone(context.Background())
	path := strings.Join(segments, "/")
	r.URL.Path, r.URL.RawPath = path, ""
	return r, true
}

// bearerGiven stands for the API's authentication: the description can only
// say that a bearer token is required, not whether it is valid (a 401 is
// always allowed), so a request is refused only without one.
func bearerGiven(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme, token, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return errors.New("no bearer token")
	}
	return nil
}

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
func (s *Spec) checkNoOperation(x Exchange, req *http.Request) []string {
	path, allowed := s.pathMethods(req)
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

// pathMethods returns the path template that matches req and the methods the
// description has for it.
func (s *Spec) pathMethods(req *http.Request) (path string, allowed []string) {
	path = req.URL.Path
	for _, m := range methods {
		r := req.Clone(context.Background())
		r.Method = m
		if route, _, err := s.router.FindRoute(r); err == nil {
			path = route.Path
			allowed = append(allowed, m)
		}
	}
	slices.Sort(allowed)
	return path, allowed
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
	problems := append(checkRequiredHeaders(what, resp, x), checkBodyPresence(what, resp, x)...)
	if x.Request.Method == http.MethodHead || len(resp.Content) == 0 {
		return problems
	}
	mt := resp.Content.Get(x.Header.Get("Content-Type"))
	if mt == nil {
		return append(problems, fmt.Sprintf("%s: Content-Type %q is not one of %v", what, x.Header.Get("Content-Type"), contentTypes(resp)))
	}
	if mt.Schema == nil || mt.Schema.Value == nil {
		return problems
	}
	value, err := decodeBody(x)
	if err != nil {
		return append(problems, fmt.Sprintf("%s: the body does not decode: %v", what, err))
	}
	if err := mt.Schema.Value.VisitJSON(value, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse(), openapi3.MultiErrors()); err != nil {
		problems = append(problems, fmt.Sprintf("%s: the body is not its schema: %v", what, err))
	}
	return problems
}

// decodeBody decodes a response body the way openapi3filter does for its
// Content-Type.
func decodeBody(x Exchange) (any, error) {
	decoder := openapi3filter.RegisteredBodyDecoder(baseType(x.Header.Get("Content-Type")))
	if decoder == nil {
		return nil, fmt.Errorf("no decoder for Content-Type %q", x.Header.Get("Content-Type"))
	}
	return decoder(bytes.NewReader(x.Body), x.Header, nil, func(string) *openapi3.Encoding { return nil })
}

// checkRequiredHeaders checks that the response's required headers are
// there (openapi3filter's ValidateResponse does so for an operation's).
func checkRequiredHeaders(what string, resp *openapi3.Response, x Exchange) []string {
	var problems []string
	names := make([]string, 0, len(resp.Headers))
	for name := range resp.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := resp.Headers[name]
		if h.Value != nil && h.Value.Required && x.Header.Get(name) == "" {
			problems = append(problems, fmt.Sprintf("%s: the required header %s is missing", what, name))
		}
	}
	return problems
}

// checkBodyPresence checks what openapi3filter does not: that a response
// described without content has none, and one with content has a body.
func checkBodyPresence(what string, resp *openapi3.Response, x Exchange) []string {
	var problems []string
	if len(resp.Content) == 0 && len(x.Body) > 0 {
		problems = append(problems, fmt.Sprintf("%s is described without content, but the API sent %d bytes (Content-Type %q)",
			what, len(x.Body), x.Header.Get("Content-Type")))
	}
	if len(resp.Content) > 0 && len(x.Body) == 0 && x.Request.Method != http.MethodHead {
		problems = append(problems, fmt.Sprintf("%s is described with content %v, but the API sent no body", what, contentTypes(resp)))
	}
	return problems
}

func contentTypes(resp *openapi3.Response) []string {
	var types []string
	for t := range resp.Content {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// documented lists an operation's response statuses.
func documented(op *openapi3.Operation) []string {
	var codes []string
	for code := range op.Responses.Map() {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	return codes
}

func baseType(contentType string) string {
	t, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(t))
}

// Operations lists the described operations as "METHOD /path/{param}",
// sorted.
func (s *Spec) Operations() []string {
	var ops []string
	for path, item := range s.doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// operation returns the operation "METHOD /path", or nil.
func (s *Spec) operation(op string) *openapi3.Operation {
	method, path, _ := strings.Cut(op, " ")
	item := s.doc.Paths.Value(path)
	if item == nil {
		return nil
	}
	return item.GetOperation(method)
}

// Statuses lists the response statuses the operation "METHOD /path"
// documents, sorted.
func (s *Spec) Statuses(op string) []string {
	if o := s.operation(op); o != nil {
		return documented(o)
	}
	return nil
}

// Authenticated reports whether the operation "METHOD /path" requires a
// bearer token (the document's security, unless the operation overrides it).
func (s *Spec) Authenticated(op string) bool {
	o := s.operation(op)
	if o == nil {
		return false
	}
	if o.Security != nil {
		return len(*o.Security) > 0
	}
	return len(s.doc.Security) > 0
}
