package codecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

const faultPath = "github.com/crem-project/crem/internal/fault"

// hookFiles may name package fault: the gateway's hand-over of Config.Faults to its engines'
// hooks. (The engines' own hook files, csf/hooks.go and crf/hooks.go, do not need to.)
var hookFiles = map[string]bool{"gateway/hooks.go": true}

// namingFaults are the other files that name package fault for now, with why: the lead takes
// them off as they change. The test fails for an entry that no longer names it.
var namingFaults = map[string]string{
	"gateway/config.go":   "Config.Faults is of type fault.Set",
	"gateway/validate.go": "resolved.faults is of type fault.Set",
}

// faultNames lists where file f names an identifier of package fault, as "path:line: fault.X".
func faultNames(f File) []string {
	local := ""
	for _, imp := range f.AST.Imports {
		if p, err := strconv.Unquote(imp.Path.Value); err == nil && p == faultPath {
			local = "fault"
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	if local == "" {
		return nil
	}
	var out []string
	ast.Inspect(f.AST, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
				out = append(out, fmt.Sprintf("%s:%d: fault.%s", f.Path, f.Fset.Position(sel.Pos()).Line, sel.Sel.Name))
			}
		}
		return true
	})
	return out
}

// TestNoFaultNamedInProduct: planted faults reach the engines through their hooks alone
// (csf.Hooks, crf.Hooks, mapped by package fault): no non-test file outside internal/fault
// and hookFiles names package fault's identifiers.
func TestNoFaultNamedInProduct(t *testing.T) {
	root, err := ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	files, err := SourceFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, f := range files {
		if strings.HasPrefix(f.Path, "internal/fault/") || hookFiles[f.Path] {
			continue
		}
		names := faultNames(f)
		if len(names) == 0 {
			continue
		}
		named[f.Path] = true
		if _, ok := namingFaults[f.Path]; ok {
			continue
		}
		for _, n := range names {
			t.Errorf("%s: a planted fault named outside the hooks: give the engine a hook named for the decision it bends", n)
		}
	}
	for p := range namingFaults {
		if !named[p] {
			t.Errorf("%s is listed in namingFaults but names no fault: take it off the list", p)
		}
	}
}

// TestFaultNamesFound: faultNames finds a fault named under its import's own name or another.
func TestFaultNamesFound(t *testing.T) {
	for _, c := range []struct {
		src  string
		want int
	}{
		{`import "` + faultPath + `"; func f(s fault.Set) bool { return s.Has(fault.FixedFlowNonce) }`, 2},
		{`import pf "` + faultPath + `"; var x = pf.All()`, 1},
		{`import "strings"; var fault = struct{ X int }{}; var y = fault.X; var _ = strings.ToLower`, 0},
	} {
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, "x.go", "package p\n"+c.src, 0)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		if got := faultNames(File{Path: "x.go", AST: file, Fset: fset}); len(got) != c.want {
			t.Errorf("%q: found %v, want %d", c.src, got, c.want)
		}
	}
}
