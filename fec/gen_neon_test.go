package fec

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenNeonMatchesCommitted regenerates neon_arm64.s into a temporary file and requires
// the committed one to be exactly what gen_neon.go writes, so the assembly never drifts from
// its generator.
func TestGenNeonMatchesCommitted(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot run gen_neon.go")
	}
	want, err := os.ReadFile("neon_arm64.s")
	if err != nil {
		t.Fatalf("reading the committed kernels: %v", err)
	}
	out := filepath.Join(t.TempDir(), "neon_arm64.s")
	cmd := exec.Command(goTool, "run", "gen_neon.go", out)
	// The generator runs on the machine that runs the test; a cross-compiled test (GOARCH
	// set for an emulator) must not make it build for the emulated target.
	cmd.Env = hostEnv(os.Environ())
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run gen_neon.go: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("reading the regenerated kernels: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("neon_arm64.s differs from what gen_neon.go writes (%d octets, regenerated %d): run go generate in fec", len(want), len(got))
	}
}

// hostEnv drops the target selection from env.
func hostEnv(env []string) []string {
	var kept []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "GOARCH=") || strings.HasPrefix(kv, "GOOS=") {
			continue
		}
		kept = append(kept, kv)
	}
	return kept
}
