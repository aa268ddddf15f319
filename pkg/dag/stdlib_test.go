package dag_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// pkg/dag is pure: it may import only the standard library (no NATS, no
// SSH, no YAML) and pkg/template, which renders its command templates
// and is as pure. go list -deps names every package it pulls in.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, pkg := range []string{".", "./dagtest", "../template"} {
		out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, line := range strings.Fields(string(out)) {
			if !strings.HasPrefix(line, "github.com/gantry-dev/gantry/pkg/dag") && line != "github.com/gantry-dev/gantry/pkg/template" {
				t.Errorf("%s imports non-standard package %s", pkg, line)
			}
		}
	}
}
