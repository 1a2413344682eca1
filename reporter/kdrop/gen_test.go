package kdrop

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestGeneratedProgramIsCurrent regenerates the program's object and Go file with gen.go's
// go:generate command (into a directory of its own) and compares them with the committed ones.
// Skips where clang, llvm-strip or libbpf's headers are missing (they are needed only to
// regenerate; building crem needs none of them).
func TestGeneratedProgramIsCurrent(t *testing.T) {
	for _, tool := range []string{"clang", "llvm-strip", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s to regenerate the program (Debian: apt-get install clang llvm libbpf-dev)", tool)
		}
	}
	if _, err := os.Stat("/usr/include/bpf/bpf_helpers.h"); err != nil {
		t.Skip("needs libbpf's headers to regenerate the program (Debian: libbpf-dev)")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("gen.go's include path is the amd64 one")
	}
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, l := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(l, "//go:generate go run "); ok {
			args = strings.Fields(rest)
		}
	}
	if len(args) < 2 {
		t.Fatal("no go:generate line in gen.go")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", append([]string{"run", args[0], "-output-dir", dir, "-go-package", "kdrop"}, args[1:]...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bpf2go: %v\n%s", err, out)
	}
	for _, f := range []string{"kdrop_bpfel.o", "kdrop_bpfel.go"} {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what kdrop.c gives: run go generate ./reporter/kdrop", f)
		}
	}
}
