package openapitest

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

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

// operation returns the operation "METHOD /path", or nil.
func (s *Spec) operation(op string) *openapi3.Operation {
	method, path, _ := strings.Cut(op, " ")
	item := s.doc.Paths.Value(path)
	if item == nil {
		return nil
	}
	return item.GetOperation(method)
}

// documented lists an operation's response statuses.
func documented(op *openapi3.Operation) []string {
	return sortedKeys(op.Responses.Map())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// OperationFor returns the operation ("METHOD /path/{param}") a request of
// method to path reaches, or "" when none does.
func (s *Spec) OperationFor(method, path string) string {
	req, err := http.NewRequestWithContext(context.Background(), method, path, nil)
	if err != nil {
		return ""
	}
	m := s.paths.find(req)
	if m.path == "" || s.doc.Paths.Value(m.path).GetOperation(method) == nil {
		return ""
	}
	return method + " " + m.path
}
