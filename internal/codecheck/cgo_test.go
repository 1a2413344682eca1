package codecheck

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// benchISAL is the module of the benchmark beside Intel's ISA-L, which links libisal through
// cgo, and its module path.
const (
	benchISAL       = "bench/isal"
	benchISALModule = "github.com/crem-project/crem/bench/isal"
)

// TestCgoOnlyInNestedModules: the product builds with CGO_ENABLED=0, so no Go file of the module
// imports "C". Code that links C (the ISA-L benchmark) lives in a module of its own nested in the
// tree, which `go build ./...`, `go vet ./...` and `go test ./...` at the root do not enter: the
// test walks the whole tree and fails for a cgo file outside such a module, and checks that
// bench/isal declares its own module.
func TestCgoOnlyInNestedModules(t *testing.T) {
	root, err := ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	nested := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (IgnoredDir(name)) {
				return filepath.SkipDir
			}
			if p != root && NestedModule(p) {
				nested++
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "C" {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s imports \"C\": the module builds with CGO_ENABLED=0; put code that links C in a module of its own (as %s)", rel, benchISAL)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := modulePath(t, filepath.Join(root, benchISAL, "go.mod")); got != benchISALModule {
		t.Errorf("%s/go.mod declares module %q, want %q", benchISAL, got, benchISALModule)
	}
	if nested == 0 {
		t.Errorf("no nested module found under %s, though %s should be one", root, benchISAL)
	}
	files, err := SourceFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasPrefix(f.Path, benchISAL+"/") {
			t.Errorf("SourceFiles lists %s, which is in the nested module %s", f.Path, benchISAL)
		}
	}
}

// modulePath is the path the module directive of the go.mod at p declares.
func modulePath(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("%v (the ISA-L benchmark must stay a module of its own)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ""
}
