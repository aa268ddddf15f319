package services_test

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

const module = "github.com/gantry-dev/gantry"

// binaries are the programs gantry ships: the CLI and the four services.
var binaries = []string{"cmd/gantry", "services/planner", "services/executor", "services/health-gate", "services/state-store"}

// testSupport says whether a package is for tests only: the standard
// library's testing, or one of gantry's whose name ends in "test"
// (eventbustest, slotstest, secretstest, natstest, sshtest, dagtest...).
func testSupport(pkg string) bool {
	if pkg == "testing" || strings.HasPrefix(pkg, "testing/") {
		return true
	}
	return strings.HasPrefix(pkg, module+"/") && strings.HasSuffix(path.Base(pkg), "test")
}

// linkedTestSupport lists the test-support packages a binary links.
func linkedTestSupport(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+"/"+bin).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", bin, err, stderr)
	}
	var found []string
	for _, pkg := range strings.Fields(string(out)) {
		if testSupport(pkg) {
			found = append(found, pkg)
		}
	}
	return found
}

// The in-memory stand-ins for NATS and the stores (eventbustest.MemoryBucket,
// slotstest.Memory, secretstest.Map...) are for tests: no binary gantry
// ships may link one, or a service could run on a fake without a test
// noticing.
func TestBinariesLinkNoTestSupport(t *testing.T) {
	t.Parallel()
	for _, bin := range binaries {
		if found := linkedTestSupport(t, bin); len(found) > 0 {
			t.Errorf("%s links test-support packages: %s", bin, strings.Join(found, ", "))
		}
	}
}

// The check knows a test-support package when it sees one.
func TestTestSupportIsRecognised(t *testing.T) {
	t.Parallel()
	for pkg, want := range map[string]bool{
		"testing":                             true,
		"testing/fstest":                      true,
		module + "/pkg/eventbus/eventbustest": true,
		module + "/services/executor/internal/slots/slotstest": true,
		module + "/pkg/natsembed/natstest":                     true,
		module + "/pkg/events":                                 false,
		"internal/synctest":                                    false, // the runtime's own
		"github.com/other/thingtest":                           false,
	} {
		if got := testSupport(pkg); got != want {
			t.Errorf("testSupport(%q) = %v, want %v", pkg, got, want)
		}
	}
}
