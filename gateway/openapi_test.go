package gateway

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.yaml.in/yaml/v3"
)

// openAPIPath is the spec, relative to this package.
const openAPIPath = "../docs/openapi.yaml"

// anyMethod are the methods chi registers for a route mounted with Handle
// (every method): such a route is documented under its GET operation.
var anyMethod = []string{"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}

// specPath is the OpenAPI path of a chi route pattern: a trailing "/*"
// wildcard is the path parameter {path}.
func specPath(route string) string {
	if strings.HasSuffix(route, "/*") {
		return strings.TrimSuffix(route, "*") + "{path}"
	}
	return route
}

// servedRoutes walks the node's router: OpenAPI path → the methods served
// (one "GET" for a route served on any method).
func servedRoutes(t *testing.T, h http.Handler) map[string][]string {
	t.Helper()
	r, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("Handler is %T, not a chi router", h)
	}
	byRoute := map[string][]string{}
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		byRoute[route] = append(byRoute[route], method)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for route, methods := range byRoute {
		all := true
		for _, m := range anyMethod {
			all = all && slices.Contains(methods, m)
		}
		if all {
			methods = []string{http.MethodGet}
		}
		out[specPath(route)] = methods
	}
	return out
}

// errorCodes returns the values of the Code* constants of errors.go.
func errorCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Code") {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			v, _ := strconv.Unquote(lit.Value)
			codes = append(codes, v)
		}
		return true
	})
	if len(codes) < 10 {
		t.Fatalf("found only %d Code* constants in errors.go", len(codes))
	}
	return codes
}

type openAPIDoc struct {
	OpenAPI    string                               `yaml:"openapi"`
	Paths      map[string]map[string]map[string]any `yaml:"paths"`
	Components struct {
		Schemas struct {
			Error struct {
				Properties struct {
					Error struct {
						Enum []string `yaml:"enum"`
					} `yaml:"error"`
				} `yaml:"properties"`
			} `yaml:"Error"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

// TestOpenAPICoversEveryRoute: docs/openapi.yaml documents every route and
// method the node's router serves, documents nothing it does not serve,
// lists every error code of errors.go, and every $ref in it resolves.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	raw, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("docs/openapi.yaml is openapi %q, want 3.1.0", doc.OpenAPI)
	}
	n, _, _ := testNode(t, nil)
	served := servedRoutes(t, n.Handler())

	var paths []string
	for p := range served {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for _, m := range served[p] {
			if _, ok := doc.Paths[p][strings.ToLower(m)]; !ok {
				t.Errorf("route %s %s is served but not documented: add paths.%q.%s to docs/openapi.yaml", m, p, p, strings.ToLower(m))
			}
		}
	}
	for p, ops := range doc.Paths {
		methods, ok := served[p]
		if !ok {
			t.Errorf("docs/openapi.yaml documents %s, which the router does not serve: remove it or add the route", p)
			continue
		}
		for op := range ops {
			switch op {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				if !slices.Contains(methods, strings.ToUpper(op)) {
					t.Errorf("docs/openapi.yaml documents %s %s, which the router does not serve (it serves %v)", strings.ToUpper(op), p, methods)
				}
			}
		}
	}

	enum := doc.Components.Schemas.Error.Properties.Error.Enum
	for _, code := range errorCodes(t) {
		if !slices.Contains(enum, code) {
			t.Errorf("error code %q (gateway/errors.go) is missing from components.schemas.Error.properties.error.enum", code)
		}
	}

	var tree any
	if err := yaml.Unmarshal(raw, &tree); err != nil {
		t.Fatal(err)
	}
	checkRefs(t, tree, tree)
}

// checkRefs fails for every "$ref" under node that does not resolve in root.
func checkRefs(t *testing.T, root, node any) {
	t.Helper()
	switch v := node.(type) {
	case map[string]any:
		for k, c := range v {
			if ref, ok := c.(string); ok && k == "$ref" {
				if !resolves(root, ref) {
					t.Errorf("docs/openapi.yaml: $ref %q does not resolve", ref)
				}
				continue
			}
			checkRefs(t, root, c)
		}
	case []any:
		for _, c := range v {
			checkRefs(t, root, c)
		}
	}
}

func resolves(root any, ref string) bool {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	cur := root
	for _, part := range strings.Split(rest, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}
