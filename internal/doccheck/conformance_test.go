package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// reference matches `pkg.TestName` or `pkg/sub.FuzzName` in backquotes.
var reference = regexp.MustCompile("`([a-z][a-z0-9/]*)\\.((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]+)`")

// TestConformanceNamesRealTests fails when docs/conformance.md names a test that does not exist,
// so the table cannot drift away from the code.
func TestConformanceNamesRealTests(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "conformance.md"))
	if err != nil {
		t.Fatalf("reading the conformance table: %v", err)
	}
	refs := reference.FindAllStringSubmatch(string(doc), -1)
	if len(refs) < 30 {
		t.Fatalf("the conformance table names only %d tests", len(refs))
	}
	sources := map[string]string{}
	for _, ref := range refs {
		pkg, name := ref[1], ref[2]
		src, ok := sources[pkg]
		if !ok {
			files, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*_test.go"))
			var b strings.Builder
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				b.Write(data)
			}
			src = b.String()
			sources[pkg] = src
		}
		if !regexp.MustCompile(`func ` + name + `\(`).MatchString(src) {
			t.Errorf("docs/conformance.md names %s.%s, which does not exist", pkg, name)
		}
	}
}
