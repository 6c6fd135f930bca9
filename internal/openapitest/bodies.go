package openapitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// bodySchemas compiles each body schema of the description once, with the
// JSON Schema 2020-12 validator that kin-openapi uses for OpenAPI 3.1
// documents. kin-openapi's own Schema.VisitJSON compiles the schema anew on
// every call: 5 ms for a page of posts, which doubled the API's tests.
type bodySchemas struct {
	// components is components.schemas as JSON, where every $ref of a body
	// schema points.
	components any
	compiled   sync.Map // *openapi3.SchemaRef → *jsonschema.Schema
}

func newBodySchemas(doc *openapi3.T) (*bodySchemas, error) {
	raw, err := json.Marshal(doc.Components.Schemas)
	if err != nil {
		return nil, fmt.Errorf("%s: components.schemas: %w", File, err)
	}
	components, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: components.schemas: %w", File, err)
	}
	return &bodySchemas{components: components}, nil
}

// validate checks value against the schema ref.
func (b *bodySchemas) validate(ref *openapi3.SchemaRef, value any) error {
	schema, err := b.compile(ref)
	if err != nil {
		return err
	}
	return schema.Validate(value)
}

func (b *bodySchemas) compile(ref *openapi3.SchemaRef) (*jsonschema.Schema, error) {
	if s, ok := b.compiled.Load(ref); ok {
		return s.(*jsonschema.Schema), nil
	}
	raw, err := json.Marshal(ref)
	if err != nil {
		return nil, err
	}
	schema, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	// One resource: the schema, beside the components its $refs name
	// ("#/components/schemas/…").
	const url = "file:///docs/openapi.yaml"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // date-time, uri-reference: assertions, as kin-openapi has them
	c.RegisterFormat(&jsonschema.Format{Name: "int64", Validate: isInt64})
	root := map[string]any{"allOf": []any{schema}, "components": map[string]any{"schemas": b.components}}
	if err := c.AddResource(url, root); err != nil {
		return nil, err
	}
	compiled, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("compile a schema of %s: %w", File, err)
	}
	b.compiled.Store(ref, compiled)
	return compiled, nil
}

// checkContent checks a response's body against what resp describes: none,
// or one of its media types, decoded as such and valid against its schema.
func (s *Spec) checkContent(what string, resp *openapi3.Response, x Exchange) []string {
	switch {
	case x.Request.Method == http.MethodHead:
		return nil
	case len(resp.Content) == 0 && len(x.Body) > 0:
		return []string{fmt.Sprintf("%s is described without content, but the API sent %d bytes (Content-Type %q)",
			what, len(x.Body), x.Header.Get("Content-Type"))}
	case len(resp.Content) == 0:
		return nil
	case len(x.Body) == 0:
		return []string{fmt.Sprintf("%s is described with content %v, but the API sent no body", what, contentTypes(resp))}
	}
	contentType := x.Header.Get("Content-Type")
	mt := resp.Content.Get(contentType)
	if mt == nil {
		return []string{fmt.Sprintf("%s: Content-Type %q is not one of %v", what, contentType, contentTypes(resp))}
	}
	if mt.Schema == nil {
		return nil
	}
	value, err := decodeBody(contentType, x.Header, x.Body)
	if err != nil {
		return []string{fmt.Sprintf("%s: the body is not %s: %v", what, contentType, err)}
	}
	if err := s.bodies.validate(mt.Schema, value); err != nil {
		return []string{fmt.Sprintf("%s: the body is not its schema%s: %v", what, schemaName(mt.Schema), err)}
	}
	return nil
}

// checkRequestBody checks a request's body against the operation's: the API
// reads every body as JSON, whatever its Content-Type.
func (s *Spec) checkRequestBody(route *routers.Route, body []byte) error {
	rb := route.Operation.RequestBody
	if rb == nil || rb.Value == nil {
		return nil
	}
	if len(body) == 0 {
		if rb.Value.Required {
			return errors.New("the request body is required")
		}
		return nil
	}
	mt := rb.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil {
		return nil
	}
	value, err := decodeJSON(body)
	if err != nil {
		return fmt.Errorf("the request body is not JSON: %w", err)
	}
	if err := s.bodies.validate(mt.Schema, value); err != nil {
		return fmt.Errorf("the request body is not its schema%s: %w", schemaName(mt.Schema), err)
	}
	return nil
}

// decodeBody decodes a body of the given Content-Type: JSON exactly (numbers
// as written), others with openapi3filter's decoder for the type, other text
// as a string.
func decodeBody(contentType string, header http.Header, body []byte) (any, error) {
	base, _, _ := strings.Cut(contentType, ";")
	base = strings.ToLower(strings.TrimSpace(base))
	if base == "application/json" {
		return decodeJSON(body)
	}
	decoder := openapi3filter.RegisteredBodyDecoder(base)
	if decoder == nil && strings.HasPrefix(base, "text/") {
		decoder = openapi3filter.PlainBodyDecoder // text/html, say: a string
	}
	if decoder == nil {
		return nil, fmt.Errorf("no decoder for %q", base)
	}
	return decoder(bytes.NewReader(body), header, nil, func(string) *openapi3.Encoding { return nil })
}

// decodeJSON decodes one JSON value and nothing after it.
func decodeJSON(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// isInt64 is the format int64: a number that is an integer an int64 holds
// (a maximum of 2^63-1 cannot say so: it is read as a float64, 2^63).
func isInt64(v any) error {
	n, ok := v.(json.Number)
	if !ok {
		return nil // not a number decoded by decodeJSON: the type keyword's case
	}
	if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
		return fmt.Errorf("%s is not an int64", n)
	}
	return nil
}

func schemaName(ref *openapi3.SchemaRef) string {
	if ref.Ref != "" {
		return " " + ref.Ref
	}
	return ""
}

func contentTypes(resp *openapi3.Response) []string {
	types := make([]string, 0, len(resp.Content))
	for t := range resp.Content {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}
