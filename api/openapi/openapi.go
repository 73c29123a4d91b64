// Package openapi holds the OpenAPI 3.1 document of the gateway's HTTP API, as JSON
// (openapi.json), for the gateway to serve at GET /openapi.json. It is generated from
// docs/openapi.yaml, the document's source (`go generate ./api/openapi`); the package's test
// fails when the two differ. It imports nothing of the repository; JSON is read-only.
package openapi

import _ "embed"

//go:generate go test -run ^TestGenerated$ -update .

// JSON is the document. Callers must not modify it.
//
//go:embed openapi.json
var JSON []byte
