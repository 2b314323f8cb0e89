package testkit_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/relaygw/relay"

const kits = module + "/internal/testkit"

// pkg is one package of the module as go list reports it.
type pkg struct {
	path         string
	imports      []string // of the non-test files
	deps         []string // transitive, of the non-test files
	testImports  []string // of the package's own _test.go files
	xtestImports []string // of its package foo_test files
}

// listModule runs go list over the whole module.
func listModule(t *testing.T) map[string]pkg {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the module's imports: %v", err)
	}
	const sep = "\t"
	cmd := exec.Command(gobin, "list", "-f",
		`{{.ImportPath}}`+sep+`{{join .Imports " "}}`+sep+`{{join .Deps " "}}`+sep+`{{join .TestImports " "}}`+sep+`{{join .XTestImports " "}}`,
		module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]pkg{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<24)
	for sc.Scan() {
		f := strings.Split(sc.Text(), sep)
		if len(f) != 5 {
			t.Fatalf("go list: unexpected line %q", sc.Text())
		}
		pkgs[f[0]] = pkg{f[0], strings.Fields(f[1]), strings.Fields(f[2]), strings.Fields(f[3]), strings.Fields(f[4])}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := pkgs[module+"/session"]; !ok {
		t.Fatalf("go list did not list %s/session; got %d packages", module, len(pkgs))
	}
	return pkgs
}

func isKit(path string) bool { return path == kits || strings.HasPrefix(path, kits+"/") }

// TestKitsAreImportedOnlyByTests: no production package imports a test kit.
func TestKitsAreImportedOnlyByTests(t *testing.T) {
	pkgs := listModule(t)
	used := 0
	for _, p := range pkgs {
		for _, imp := range p.testImports {
			if isKit(imp) {
				used++
			}
		}
		if isKit(p.path) {
			continue
		}
		for _, imp := range p.imports {
			if isKit(imp) {
				t.Errorf("%s imports the test kit %s outside its _test.go files; kits are for tests only", p.path, imp)
			}
		}
	}
	if used == 0 {
		t.Fatal("no package's tests import a kit: the listing is not what this test expects")
	}
}

// TestTestsImportDownward: a package's tests never import a package that
// imports it, directly or through others. Exempt as the imported side are
// the kits (proctest runs the gateway for the gateway's own tests) and the
// package's own subpackages, which implement its interfaces (session's
// tests run against session/pgstore, muster's over muster/memnet).
func TestTestsImportDownward(t *testing.T) {
	pkgs := listModule(t)
	for _, p := range pkgs {
		for _, imp := range slices.Concat(p.testImports, p.xtestImports) {
			q, ok := pkgs[imp]
			if !ok || imp == p.path || isKit(imp) || strings.HasPrefix(imp, p.path+"/") {
				continue
			}
			if slices.Contains(q.deps, p.path) {
				t.Errorf("the tests of %s import %s, which imports %s: move the test to %s or use what %s has", p.path, imp, p.path, imp, p.path)
			}
		}
	}
	// The two upward imports this rule was written against.
	for path, upper := range map[string]string{module + "/session": module + "/gateway", module + "/muster": module + "/presence"} {
		p := pkgs[path]
		if slices.Contains(slices.Concat(p.testImports, p.xtestImports), upper) {
			t.Errorf("the tests of %s import %s", path, upper)
		}
		if !slices.Contains(pkgs[upper].deps, path) {
			t.Errorf("%s no longer depends on %s: the check above proves nothing", upper, path)
		}
	}
}
