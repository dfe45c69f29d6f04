package httpapi

import (
	_ "embed"
	"maps"
	"net/http"
	"slices"
)

// openAPI is the API's OpenAPI 3.1 description, served at
// /api/v1/openapi.json. A test holds it to the server: every route, method,
// status and error code of one is in the other.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPI)
}

// Route is an endpoint of the server: a net/http pattern, the route's name
// in the latency metric, and the methods it serves (HEAD, served for every
// GET, is not listed).
type Route struct {
	Pattern string
	Name    string
	Methods []string
}

func newRoute(pattern, name string, methods map[string]http.HandlerFunc) Route {
	return Route{Pattern: pattern, Name: name, Methods: slices.Sorted(maps.Keys(methods))}
}

// Routes lists the server's endpoints in the order they were registered.
func (s *Server) Routes() []Route { return slices.Clone(s.routes) }

// ErrorStatuses maps each error code the API answers with to its HTTP
// status.
func ErrorStatuses() map[string]int { return maps.Clone(codes) }
