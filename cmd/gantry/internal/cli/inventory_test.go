package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
)

func TestInventoryCommand(t *testing.T) {
	inv := examples + "fleet/inventory.yaml"
	code, out, errOut := run(t, "inventory", inv)
	want := `HOST     ADDRESS         USER      TRANSPORT  VIA      VARS
bastion  203.0.113.5     ops       ssh        -        domain=example.com
db-1     10.0.0.21:2222  postgres  ssh        bastion  domain=example.com env=prod
web-1    10.0.0.11       ops       ssh        bastion  app_root=/srv/app domain=example.com env=prod port=8081
web-2    10.0.0.12       ops       ssh        bastion  app_root=/srv/app domain=example.com env=prod port=8082
web-3    10.0.0.13       ops       ssh        bastion  app_root=/srv/app domain=example.com env=prod port=8083

GROUP  HOSTS
db     db-1
prod   db-1, web-1, web-2, web-3
web    web-1, web-2, web-3
5 host(s), 3 group(s)
`
	if code != ExitOK || out != want {
		t.Fatalf("exit %d\n%s\nwant\n%s\n%s", code, out, want, errOut)
	}

	code, out, _ = run(t, "inventory", inv, "-o", "json")
	var got struct {
		Hosts  map[string]dag.Host  `json:"hosts"`
		Groups map[string]dag.Group `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != ExitOK {
		t.Fatalf("json: exit %d %v\n%s", code, err, out)
	}
	read, err := composition.ReadInventoryFile(inv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Hosts, read.Hosts) || !reflect.DeepEqual(got.Groups, read.Groups) || got.Hosts["web-2"].Vars["port"] != "8082" {
		t.Errorf("json %+v, want %+v", got, read)
	}

	dir := t.TempDir()
	bad := filepath.Join(dir, "inventory.yaml")
	os.WriteFile(bad, []byte(`all:
  hosts:
    Web1.example.com:
  children:
    web:
      hosts:
        web-1:
          ports: [80, 443]
          ansible_ssh_common_args: -J gone
`), 0o644)
	code, out, errOut = run(t, "inventory", bad)
	for _, w := range []string{
		bad + `:3: all.hosts["Web1.example.com"]: host name "Web1.example.com" contains '.', which would break NATS subjects; names match [a-z0-9][a-z0-9_-]{0,62}; write it as web1-example-com with ansible_host: Web1.example.com`,
		bad + `:8: all.children.web.hosts.web-1.ports: expected a string, number or boolean, got a list: gantry variables are text`,
		bad + `:9: all.children.web.hosts.web-1.ansible_ssh_common_args: ProxyJump gone is not a host of the inventory`,
		bad + ": 3 problem(s)",
	} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
	if code != ExitFailed || out != "" {
		t.Errorf("bad inventory: exit %d, stdout %q", code, out)
	}
	if code, _, _ = run(t, "inventory", bad, "-o", "yaml"); code != ExitUsage {
		t.Errorf("-o yaml: exit %d", code)
	}

	// validate and plan read a composition's inventory next to it, and
	// name the inventory's file and line for its problems.
	os.WriteFile(filepath.Join(dir, "good.yaml"), []byte("all:\n  hosts:\n    me: {ansible_connection: local}\n"), 0o644)
	comp := filepath.Join(dir, "c.yaml")
	os.WriteFile(comp, []byte("name: c\ninventory: good.yaml\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'true'}]\n"), 0o644)
	if code, out, errOut = run(t, "validate", comp); code != ExitOK || !strings.Contains(out, "c.yaml: valid: c: create 1 formulas") {
		t.Errorf("validate with an inventory: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = run(t, "plan", comp); code != ExitOK || !strings.Contains(out, "a on me") {
		t.Errorf("plan with an inventory: exit %d\n%s%s", code, out, errOut)
	}
	os.WriteFile(comp, []byte("name: c\ninventory: inventory.yaml\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'true'}]\n"), 0o644)
	code, _, errOut = run(t, "validate", comp)
	if code != ExitFailed || !strings.Contains(errOut, bad+`:8: all.children.web.hosts.web-1.ports: expected a string`) || !strings.Contains(errOut, comp+": 3 problem(s)") {
		t.Errorf("validate with a bad inventory: exit %d\n%s", code, errOut)
	}
}
