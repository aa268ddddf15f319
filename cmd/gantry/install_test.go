package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// modulePath is what `go install github.com/gantry-dev/gantry/cmd/gantry@v1.2.0`
// asks the module proxy for: go.mod must declare it.
const modulePath = "github.com/gantry-dev/gantry"

// goModule runs the go command on the module alone (no go.work), as go
// install pkg@version does; it changes no file. scripts/install-test.sh
// (make package-test) runs that go install itself.
func goModule(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestGoModInstallable: go install ...@version refuses a module whose
// go.mod has replace or exclude directives, or names another path.
func TestGoModInstallable(t *testing.T) {
	var mod struct {
		Module  struct{ Path string }
		Replace []json.RawMessage
		Exclude []json.RawMessage
	}
	if err := json.Unmarshal(goModule(t, "mod", "edit", "-json"), &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Module.Path != modulePath {
		t.Errorf("go.mod: module %q, want %q", mod.Module.Path, modulePath)
	}
	if len(mod.Replace) > 0 || len(mod.Exclude) > 0 {
		t.Errorf("go.mod: %d replace and %d exclude directives; go install %s/cmd/gantry@VERSION refuses them", len(mod.Replace), len(mod.Exclude), modulePath)
	}
	if main := strings.TrimSpace(string(goModule(t, "list", "-m"))); main != modulePath {
		t.Errorf("go list -m: %q, want %q", main, modulePath)
	}
	if pkg := strings.TrimSpace(string(goModule(t, "list", "-f", "{{.Name}} {{.ImportPath}}", "./cmd/gantry"))); pkg != "main "+modulePath+"/cmd/gantry" {
		t.Errorf("go list ./cmd/gantry: %q, want a main package %s/cmd/gantry", pkg, modulePath)
	}
	if _, err := os.Stat(filepath.Join("../..", "go.sum")); err != nil {
		t.Errorf("go.sum: %v", err)
	}
}
