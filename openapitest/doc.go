// Package openapitest checks the gateway's OpenAPI document (docs/openapi.yaml, served as
// GET /openapi.json) against a running gateway: the document is a valid OpenAPI 3.1 document,
// and every operation it describes answers, on the real binary (GATEWAY_BIN) serving a real
// model, with requests and answers the document accepts. It is a Go module of its own so that
// the validator (github.com/pb33f/libopenapi-validator) stays out of the server's go.mod, as
// deploy/ keeps its checks apart. `make openapi-test` runs it (in `make test`).
package openapitest
