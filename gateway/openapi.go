package gateway

import (
	"github.com/valyala/fasthttp"

	"github.com/imagegate/imagegate/api/openapi"
)

// serveOpenAPI answers GET /openapi.json, on the public and the admin listener: the OpenAPI
// document of every endpoint (docs/openapi.yaml).
func (s *Server) serveOpenAPI(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		s.methodNotAllowed(ctx, "GET")
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(openapi.JSON)
}
