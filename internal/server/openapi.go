package server

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3 document of the API, served at
// GET /v1/openapi.yaml.
//
//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document (YAML) that describes the API.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openAPI)
}
