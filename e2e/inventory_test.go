package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
)

// A composition whose hosts come from an Ansible inventory (INI, with its
// group_vars/): gantry submit inlines the inventory (the planner cannot
// read the submitter's files), so the run finds its host and its group's
// variables; gantry drift does the same; the planner rejects the
// composition as written, still naming its inventory.
func TestCLIInventory(t *testing.T) {
	s := newStack(t, stackOptions{})
	bin := buildGantry(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "inv", "group_vars"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "inv", "hosts"), []byte("[ctl]\nme ansible_connection=local\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "inv", "group_vars", "ctl.yml"), []byte("role: ctl\nntp: [a, b]\n"), 0o644)
	comp := filepath.Join(dir, "fleet.yaml")
	doc := "name: inv\ninventory: inv/hosts\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'test from-{{ .Vars.role }}{{ range fromjson .Vars.ntp }}-{{ . }}{{ end }}{{ range .Vars.ntp }}+{{ . }}{{ end }} = from-ctl-a-b+a+b'}]\n"
	os.WriteFile(comp, []byte(doc), 0o644)
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...)
		cmd.Dir = t.TempDir() // the inventory is found next to the composition, not in the working directory
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, isExit := err.(*exec.ExitError); isExit {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	code, out := run("submit", comp, "--watch")
	if code != 0 || !strings.Contains(out, "a/n") || !strings.Contains(out, "workflow inv SUCCEEDED") {
		t.Fatalf("submit with an inventory: exit %d\n%s", code, out)
	}
	if code, out = run("drift", comp, "--records"); code != 0 || !strings.Contains(out, "inv: 1 ok, 0 changed, 0 missing, 0 orphaned") {
		t.Fatalf("drift with an inventory: exit %d\n%s", code, out)
	}
	// As written, over the bus: rejected, saying why.
	r, errCode := s.submit([]byte(doc))
	if errCode != "400" || r.Status != "rejected" || !slices.ContainsFunc(r.Errors, func(e string) bool {
		return strings.Contains(e, "inventory is read by the gantry CLI: submit with gantry submit FILE, which inlines it")
	}) {
		t.Fatalf("composition naming its inventory, sent as is: %s %s %v", errCode, r.Status, r.Errors)
	}
	// A bad inventory stops submit before anything is sent, with its file and line.
	os.WriteFile(filepath.Join(dir, "inv", "hosts"), []byte("[ctl]\nme ansible_connection=local bogus\n"), 0o644)
	code, out = run("submit", comp)
	if code != 1 || !strings.Contains(out, filepath.Join(dir, "inv", "hosts")+`:2: [ctl] me: expected key=value after the host, got "bogus"`) ||
		!strings.Contains(out, "rejected: 1 problem(s); nothing was run") {
		t.Fatalf("submit with a bad inventory: exit %d\n%s", code, out)
	}
}
