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

// TestConformanceNamesRealTests fails when docs/conformance.md or docs/decisions.md names a test
// that does not exist, so neither can drift away from the code.
func TestConformanceNamesRealTests(t *testing.T) {
	root := filepath.Join("..", "..")
	sources := map[string]string{}
	for _, name := range []string{"conformance.md", "decisions.md"} {
		namesRealTests(t, root, name, sources)
	}
}

// namesRealTests checks the tests one document of docs/ names.
func namesRealTests(t *testing.T, root, name string, sources map[string]string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", name))
	if err != nil {
		t.Fatalf("reading docs/%s: %v", name, err)
	}
	refs := reference.FindAllStringSubmatch(string(doc), -1)
	if len(refs) < 30 {
		t.Fatalf("docs/%s names only %d tests", name, len(refs))
	}
	for _, ref := range refs {
		pkg, test := ref[1], ref[2]
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
		if !regexp.MustCompile(`func ` + test + `\(`).MatchString(src) {
			t.Errorf("docs/%s names %s.%s, which does not exist", name, pkg, test)
		}
	}
}
