package gateway

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"
)

// openAPIPath is the spec, relative to this package.
const openAPIPath = "../docs/openapi.yaml"

// anyMethod are the methods chi registers for a route mounted with Handle
// (every method): such a route is documented under its GET operation.
var anyMethod = []string{"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}

// specPath is the OpenAPI path of a chi route pattern: a parameter
// "{name}" or "{name:regexp}" is "{name}", and a trailing "/*" wildcard is
// the path parameter {path}.
func specPath(route string) string {
	if strings.HasSuffix(route, "/*") {
		route = strings.TrimSuffix(route, "*") + "{path}"
	}
	var b strings.Builder
	depth, skip := 0, false
	for _, r := range route {
		switch {
		case r == '{':
			depth++
			if depth == 1 {
				skip = false
			}
		case r == '}':
			depth--
			if depth == 0 {
				skip = false
			}
		case r == ':' && depth == 1:
			skip = true
		}
		if !skip {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSpecPath(t *testing.T) {
	for route, want := range map[string]string{
		"/api/sessions/{id}/events":      "/api/sessions/{id}/events",
		"/admin/nodes/{node}/drain":      "/admin/nodes/{node}/drain",
		"/assets/*":                      "/assets/{path}",
		"/x/{id:[0-9]+}/y":               "/x/{id}/y",
		"/x/{id:[a-z]{2,3}}/{n:\\d+}":    "/x/{id}/{n}",
		"/":                              "/",
		"/admin/debug/pprof/{name}/tail": "/admin/debug/pprof/{name}/tail",
	} {
		if got := specPath(route); got != want {
			t.Errorf("specPath(%q) = %q, want %q", route, got, want)
		}
	}
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
		p := specPath(route)
		out[p] = append(out[p], methods...)
	}
	return out
}

// validateOpenAPI loads an OpenAPI document with kin-openapi (every $ref
// must resolve, inside the document: no external refs) and validates it
// against the rules of its OpenAPI version, reporting every error found.
func validateOpenAPI(raw []byte) (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background(), openapi3.EnableMultiError())
}

// loadOpenAPI is docs/openapi.yaml, valid OpenAPI 3.1.0.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	raw, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := validateOpenAPI(raw)
	if err != nil {
		t.Fatalf("docs/openapi.yaml is not valid OpenAPI: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("docs/openapi.yaml is openapi %q, want 3.1.0", doc.OpenAPI)
	}
	return doc
}

// TestOpenAPIIsValid: docs/openapi.yaml passes kin-openapi's validation, and
// that validation refuses the mistakes a hand-written spec makes, so its
// pass means something.
func TestOpenAPIIsValid(t *testing.T) {
	loadOpenAPI(t)

	const head = "openapi: 3.1.0\ninfo: {title: t, version: \"1\"}\n"
	const okPaths = `paths:
  /x:
    get:
      responses:
        "200": {description: "OK, with a comma"}
`
	if _, err := validateOpenAPI([]byte(head + okPaths)); err != nil {
		t.Fatalf("a valid minimal spec was refused: %v", err)
	}
	for name, c := range map[string]struct{ spec, want string }{
		// An unquoted comma ends a flow mapping's value: the rest becomes a key.
		"unquoted comma in a response": {`paths:
  /x:
    get:
      responses:
        "200": {description: OK, with a comma}
`, "extra sibling fields: [with a comma]"},
		"unquoted comma in a schema": {`paths: {}
components:
  schemas:
    S: {type: object, properties: {a: {type: integer, description: Upper bound, seconds}}}
`, "extra sibling fields: [seconds]"},
		"dangling $ref": {`paths:
  /x:
    get:
      responses:
        "200": {$ref: "#/components/responses/Missing"}
`, "#/components/responses/Missing"},
		"undeclared path parameter": {`paths:
  /x/{id}:
    get:
      responses:
        "200": {description: OK}
`, "must define exactly all path parameters"},
		"unknown field": {`paths:
  /x:
    get:
      sumary: typo
      responses:
        "200": {description: OK}
`, "extra sibling fields: [sumary]"},
	} {
		_, err := validateOpenAPI([]byte(head + c.spec))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: validation error %v, want one containing %q", name, err, c.want)
		}
	}
}

// TestOpenAPICoversEveryRoute: docs/openapi.yaml documents every route and
// method the node's router serves, and nothing it does not serve.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	doc := loadOpenAPI(t)
	n, _, _ := testNode(t, nil)
	served := servedRoutes(t, n.Handler())
	if len(served) < 10 {
		t.Fatalf("walked only %d routes: %v", len(served), served)
	}

	var paths []string
	for p := range served {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		item := doc.Paths.Value(p)
		for _, m := range served[p] {
			if item == nil || item.GetOperation(m) == nil {
				t.Errorf("route %s %s is served but not documented: add paths.%q.%s to docs/openapi.yaml", m, p, p, strings.ToLower(m))
			}
		}
	}
	for _, p := range doc.Paths.InMatchingOrder() {
		methods, ok := served[p]
		if !ok {
			t.Errorf("docs/openapi.yaml documents %s, which the router does not serve: remove it or add the route", p)
			continue
		}
		for m := range doc.Paths.Value(p).Operations() {
			if !slices.Contains(methods, m) {
				t.Errorf("docs/openapi.yaml documents %s %s, which the router does not serve (it serves %v)", m, p, methods)
			}
		}
	}
}

// emittedCodes returns the error codes the package's HTTP answers carry:
// the values of its Code* string constants and every string literal given
// as the code of errorf or of an apiError. A code given any other way (a
// variable, a call) fails the test, so no code escapes the list.
func emittedCodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	var literal []string
	var other []string
	fset := token.NewFileSet()
	codeExpr := func(e ast.Expr) {
		switch v := e.(type) {
		case *ast.BasicLit:
			if s, err := strconv.Unquote(v.Value); err == nil && v.Kind == token.STRING {
				literal = append(literal, s)
				return
			}
		case *ast.Ident:
			if strings.HasPrefix(v.Name, "Code") || v.Name == "code" {
				return // a constant (collected below), or errorf's own parameter
			}
		case *ast.SelectorExpr:
			// rep.Error: another node's answer relayed as is (its codes are
			// this package's constants too).
			if x, ok := v.X.(*ast.Ident); ok && x.Name == "rep" && v.Sel.Name == "Error" {
				return
			}
		}
		other = append(other, fset.Position(e.Pos()).String())
	}
	inspectSources(t, fset, files, func(n ast.Node) bool {
		switch v := n.(type) {
		case *ast.ValueSpec:
			for i, name := range v.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(v.Values) {
					continue
				}
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					consts[name.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		case *ast.CallExpr:
			if id, ok := v.Fun.(*ast.Ident); ok && id.Name == "errorf" && len(v.Args) == 3 {
				codeExpr(v.Args[1])
			}
		case *ast.CompositeLit:
			if id, ok := v.Type.(*ast.Ident); ok && id.Name == "apiError" {
				for _, el := range v.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Code" {
							codeExpr(kv.Value)
						}
					}
				}
			}
		}
		return true
	})
	if len(other) > 0 {
		t.Errorf("error codes given neither as a Code* constant nor as a string literal, so not checked against docs/openapi.yaml: %v", other)
	}
	codes := slices.Collect(func(yield func(string) bool) {
		for _, v := range consts {
			if !yield(v) {
				return
			}
		}
	})
	codes = append(codes, literal...)
	slices.Sort(codes)
	codes = slices.Compact(codes)
	if len(consts) < 10 {
		t.Fatalf("found only %d Code* constants", len(consts))
	}
	return codes
}

// channelsDir is the channels package, relative to this package: the
// node serves its /socket endpoints, whose HTTP refusals carry codes too.
const channelsDir = "../channels"

// channelsCodes returns the error codes the channels package's HTTP
// answers carry: the code argument of LongPoll's refuse (a POST refused
// whole) and the "error" value of a map literal (an endpoint's Refusal
// body). A code given any other way than a string literal fails the test.
func channelsCodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(channelsDir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var codes, other []string
	fset := token.NewFileSet()
	code := func(e ast.Expr) {
		if v, ok := e.(*ast.BasicLit); ok && v.Kind == token.STRING {
			if s, err := strconv.Unquote(v.Value); err == nil {
				codes = append(codes, s)
				return
			}
		}
		other = append(other, fset.Position(e.Pos()).String())
	}
	inspectSources(t, fset, files, func(n ast.Node) bool {
		switch v := n.(type) {
		case *ast.CallExpr:
			if sel, ok := v.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "refuse" && len(v.Args) == 5 {
				code(v.Args[3])
			}
		case *ast.CompositeLit:
			if _, ok := v.Type.(*ast.MapType); !ok {
				return true
			}
			for _, el := range v.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.BasicLit); ok && k.Value == `"error"` {
						code(kv.Value)
					}
				}
			}
		}
		return true
	})
	if len(other) > 0 {
		t.Errorf("channels error codes not given as a string literal, so not checked against docs/openapi.yaml: %v", other)
	}
	if len(codes) < 3 {
		t.Fatalf("found only %d error codes in package channels: %v", len(codes), codes)
	}
	slices.Sort(codes)
	return slices.Compact(codes)
}

// TestOpenAPIErrorCodes: components.schemas.Error.properties.error.enum in
// docs/openapi.yaml is exactly the set of codes the node's HTTP answers
// carry (packages gateway and channels): none missing, none that the code
// no longer emits.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadOpenAPI(t)
	schema := doc.Components.Schemas["Error"]
	if schema == nil || schema.Value == nil || schema.Value.Properties["error"] == nil {
		t.Fatal("docs/openapi.yaml lacks components.schemas.Error.properties.error")
	}
	var enum []string
	for _, v := range schema.Value.Properties["error"].Value.Enum {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("Error.error enum value %v is not a string", v)
		}
		enum = append(enum, s)
	}
	gw, ch := emittedCodes(t), channelsCodes(t)
	for pkg, codes := range map[string][]string{"gateway": gw, "channels": ch} {
		for _, c := range codes {
			if !slices.Contains(enum, c) {
				t.Errorf("error code %q (package %s) is missing from components.schemas.Error.properties.error.enum", c, pkg)
			}
		}
	}
	for _, e := range enum {
		if !slices.Contains(gw, e) && !slices.Contains(ch, e) {
			t.Errorf("components.schemas.Error.properties.error.enum lists %q, which neither package gateway nor channels emits", e)
		}
	}
}

// inspectSources parses each non-test Go file of files and walks it with fn
// (ast.Inspect), failing t on a file that does not parse.
func inspectSources(t *testing.T, fset *token.FileSet, files []string, fn func(ast.Node) bool) {
	t.Helper()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, fn)
	}
}
