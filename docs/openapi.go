// Package docs embeds the HTTP API's description, docs/openapi.yaml, so that
// the API serves the very file its tests validate every response against.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml: the OpenAPI 3.1 description of the HTTP API.
//
//go:embed openapi.yaml
var OpenAPI []byte
