package fec

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedFilesAreCurrent runs every generator of the package (gen_*.go, each a
// `go run` program that writes its assembly into the directory it runs in) in a scratch
// directory and holds each file it writes to the committed one, so that an edit of a generator
// without `go generate`, or of a generated file by hand, fails here on every machine. It
// needs the go command; it builds the generators for the machine it runs on, whatever GOARCH
// the tests were built for.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs the generators")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to run the generators: " + err.Error())
	}
	gens, err := filepath.Glob("gen_*.go")
	if err != nil || len(gens) == 0 {
		t.Fatalf("no generators found: %v", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOARCH", "GOOS", "GOFLAGS", "CGO_ENABLED":
			continue // the generators run here, on the host
		}
		env = append(env, kv)
	}
	for _, gen := range gens {
		t.Run(gen, func(t *testing.T) {
			src, err := filepath.Abs(gen)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			cmd := exec.Command(gobin, "run", src)
			cmd.Dir, cmd.Env = dir, env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go run %s: %v\n%s", gen, err, out)
			}
			files, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(files) == 0 {
				t.Fatalf("%s wrote nothing", gen)
			}
			for _, f := range files {
				got, err := os.ReadFile(filepath.Join(dir, f.Name()))
				if err != nil {
					t.Fatal(err)
				}
				want, err := os.ReadFile(f.Name())
				if err != nil {
					t.Fatalf("%s writes %s, which is not committed: %v", gen, f.Name(), err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s is not what %s writes: run `go generate` in fec/ and commit it", f.Name(), gen)
				}
			}
		})
	}
}
