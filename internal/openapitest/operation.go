package openapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// checkOperation checks an exchange with one of the description's
// operations. refused, when set, is why the description refuses the request
// besides what is checked here.
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
			ExcludeRequestBody:  true, // checkRequestBody
			AuthenticationFunc:  tokenGiven,
		},
	}
	var problems []string
	if x.Status == http.StatusMethodNotAllowed {
		// Every operation documents 405 for the path's other methods; for
		// its own, it means the API lacks the route the description has.
		problems = append(problems, fmt.Sprintf("%s is described, but the API answered 405: it has no such route", op))
	}
	reqErr := errors.Join(refused, openapi3filter.ValidateRequest(ctx, in), s.checkRequestBody(route, x.RequestBody))
	if reqErr != nil && x.Status >= 200 && x.Status < 300 {
		problems = append(problems, fmt.Sprintf("%s: the API accepted a request the description refuses: %v", op, reqErr))
	}
	resp := route.Operation.Responses.Status(x.Status)
	if resp == nil || resp.Value == nil {
		return append(problems, fmt.Sprintf("%s documents no response %d (it documents %s): add it where the API answers it",
			op, x.Status, strings.Join(documented(route.Operation), ", ")))
	}
	what := fmt.Sprintf("%s, response %d", op, x.Status)
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 x.Status,
		Header:                 x.Header,
		// Headers here; the body (and its Content-Type) in checkContent.
		Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true, ExcludeResponseBody: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		problems = append(problems, fmt.Sprintf("%s: %v", what, err))
	}
	return append(problems, s.checkContent(what, resp.Value, x)...)
}

// requestFor rebuilds the request as the validator reads it: with its body,
// and with the Content-Type the API reads it as.
func requestFor(x Exchange) *http.Request {
	req := x.Request.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	req.ContentLength = int64(len(x.RequestBody))
	if len(x.RequestBody) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// tokenGiven stands for the API's authentication: the description can only
// say where a token must come from, not whether it is valid (a 401 is
// always allowed), so a request is refused only without one where the
// scheme wants it: a bearer token in Authorization, or an apiKey in the
// query (access_token, on the stream only).
func tokenGiven(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	req := in.RequestValidationInput.Request
	scheme := in.SecurityScheme
	switch {
	case scheme == nil:
		return fmt.Errorf("security scheme %q is not declared", in.SecuritySchemeName)
	case scheme.Type == "http" && strings.EqualFold(scheme.Scheme, "bearer"):
		kind, token, _ := strings.Cut(req.Header.Get("Authorization"), " ")
		if !strings.EqualFold(kind, "Bearer") || strings.TrimSpace(token) == "" {
			return errors.New("no bearer token")
		}
		return nil
	case scheme.Type == "apiKey" && scheme.In == "query":
		if strings.TrimSpace(req.URL.Query().Get(scheme.Name)) == "" {
			return fmt.Errorf("no %s query parameter", scheme.Name)
		}
		return nil
	}
	return fmt.Errorf("security scheme %q (%s) is not one the check knows", in.SecuritySchemeName, scheme.Type)
}
