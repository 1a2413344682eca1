package codecheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// issueRef is how a tracker's issue number shows in a name or a comment: "Issue11" in a test's
// name, "issue10" in a file's, "issue 10" or "issue #10" in a comment.
var (
	issueInName    = regexp.MustCompile(`(?i)issue_?\d+`)
	issueInComment = regexp.MustCompile(`(?i)\bissues? #?\d+\b`)
	testFunc       = regexp.MustCompile(`^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)
)

// TestNamedBySubject: no test, benchmark or fuzz target and no Go file is named by an issue
// number, and no comment of the module cites one: tests and files are named by what they
// check, and decisions are cited by their labels (docs/protocol-notes.md, docs/decisions.md).
func TestNamedBySubject(t *testing.T) {
	root, err := ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (IgnoredDir(name)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if issueInName.MatchString(name) {
			t.Errorf("%s: a file named by an issue number", rel)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		files++
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if m := testFunc.FindStringSubmatch(line); m != nil && issueInName.MatchString(m[1]) {
				t.Errorf("%s:%d: %s is named by an issue number", rel, n, m[1])
			}
			if i := strings.Index(line, "//"); i >= 0 && issueInComment.MatchString(line[i:]) && rel != "internal/codecheck/names_test.go" {
				t.Errorf("%s:%d: a comment cites an issue number: %s", rel, n, strings.TrimSpace(line[i:]))
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files read", files)
	}
}
