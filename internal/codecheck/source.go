package codecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// File is one parsed non-test Go file of the module.
type File struct {
	Path string // slash-separated, relative to the module root
	AST  *ast.File
	Fset *token.FileSet
}

// ModuleRoot is the directory of the go.mod above dir.
func ModuleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("codecheck: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("codecheck: no go.mod above %s", dir)
		}
		dir = up
	}
}

// SourceFiles parses every non-test .go file of the module at root (skipping testdata, hidden
// and underscore directories and the directories of nested modules, as the go command does), in
// path order.
func SourceFiles(root string) ([]File, error) {
	fset := token.NewFileSet()
	var out []File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (IgnoredDir(name) || NestedModule(p)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("codecheck: %w", err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return fmt.Errorf("codecheck: %w", err)
		}
		out = append(out, File{Path: filepath.ToSlash(rel), AST: f, Fset: fset})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, err
}

// IgnoredDir reports whether the go command passes over a directory of this name: testdata,
// and names beginning with "." or "_".
func IgnoredDir(name string) bool {
	return name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// NestedModule reports whether dir holds a go.mod of its own: a module nested in the tree, which
// the enclosing module's packages (and `go test ./...`, `go vet ./...`) do not include.
func NestedModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// harness are the module's directories that are not the product: internal/harness (the
// simulator, the lab, the soak, the conformance runner, the path emulator on sockets, crem perf's
// engine and the test harnesses) and the module's internal helpers.
var harness = []string{"internal/"}

// Product reports whether the file at path (relative to the module root) is product code.
func Product(path string) bool {
	for _, h := range harness {
		if strings.HasPrefix(path, h) {
			return false
		}
	}
	return true
}
