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
	want := `HOST     ADDRESS         USER      TRANSPORT  VIA      BECOME  KEY  VARS
bastion  203.0.113.5     ops       ssh        -        -       -    domain=example.com
db-1     10.0.0.21:2222  postgres  ssh        bastion  -       -    domain=example.com env=prod
web-1    10.0.0.11       ops       ssh        bastion  -       -    app_root=/srv/app domain=example.com env=prod port=8081
web-2    10.0.0.12       ops       ssh        bastion  -       -    app_root=/srv/app domain=example.com env=prod port=8082
web-3    10.0.0.13       ops       ssh        bastion  -       -    app_root=/srv/app domain=example.com env=prod port=8083

GROUP  HOSTS
db     db-1
prod   db-1, web-1, web-2, web-3
web    web-1, web-2, web-3
5 host(s), 3 group(s), 0 warning(s)
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
	os.WriteFile(bad, []byte(`[web]
web-1 ansible_become_method=su
web-2 ansible_ssh_common_args='-o ProxyCommand="ssh -W %h:%p bastion"'
[web:vars]
ansible_ssh_common_args=-J gone
`), 0o644)
	code, out, errOut = run(t, "inventory", bad)
	for _, w := range []string{
		bad + `:2: [web] web-1 ansible_become_method: ansible_become_method "su" is not supported: gantry becomes another user with sudo -n (passwordless sudo) only`,
		bad + `:3: [web] web-2 ansible_ssh_common_args: ansible_ssh_common_args: ProxyCommand "ssh -W %h:%p bastion" is refused: gantry runs no proxy command, it jumps through a host of the inventory itself: write -o ProxyJump=bastion (or -J bastion) instead`,
		bad + `:5: [web:vars] ansible_ssh_common_args: ProxyJump gone is not a host of the inventory`,
		bad + ": 3 problem(s)",
	} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
	if code != ExitFailed || out != "" {
		t.Errorf("bad inventory: exit %d, stdout %q", code, out)
	}
	if code, _, _ = run(t, "inventory", bad, "-o", "toml"); code != ExitUsage {
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
	if code != ExitFailed || !strings.Contains(errOut, bad+`:2: [web] web-1 ansible_become_method: ansible_become_method "su" is not supported`) || !strings.Contains(errOut, comp+": 3 problem(s)") {
		t.Errorf("validate with a bad inventory: exit %d\n%s", code, errOut)
	}
}

// TestInventoryCommandShowsWhatItLeavesOut: an INI inventory with its
// group_vars/: typed variables, the become user and key, the ansible_*
// variables gantry does not act on, and warnings on stderr; a secret's
// value is printed as ***, in the table and in -o json.
func TestInventoryCommandShowsWhatItLeavesOut(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "group_vars"), 0o755)
	inv := filepath.Join(dir, "hosts")
	os.WriteFile(inv, []byte(`[web]
10.0.0.11 ansible_user=ops ansible_become=true ansible_become_user=app ansible_ssh_private_key_file=~/.ssh/fleet
[web:vars]
ansible_python_interpreter=/usr/bin/python3
`), 0o644)
	os.WriteFile(filepath.Join(dir, "group_vars", "web.yml"), []byte("ntp_servers: [0.pool.ntp.org, 1.pool.ntp.org]\ncfg: {port: 8080, tls: yes}\ndb_password: hunter2\n"), 0o644)

	code, out, errOut := run(t, "inventory", inv)
	want := `HOST       ADDRESS    USER  TRANSPORT  VIA  BECOME  KEY           VARS
10.0.0.11  10.0.0.11  ops   ssh        -    app     ~/.ssh/fleet  cfg={"port":8080,"tls":true} db_password=*** ntp_servers=["0.pool.ntp.org","1.pool.ntp.org"]

GROUP  HOSTS
web    10.0.0.11

IGNORED (gantry does not act on these)  HOSTS
ansible_python_interpreter              1
1 host(s), 1 group(s), 1 warning(s)
`
	if code != ExitOK || out != want {
		t.Errorf("exit %d\n%s\nwant\n%s", code, out, want)
	}
	wantErr := filepath.Join(dir, "group_vars", "web.yml") + ":3: db_password: warning: db_password looks like a secret and holds its value: gantry leaves it out of the hosts' vars (they travel as plain text) and never prints it; keep the value in a file db_password in the executor's --secrets-dir and give it to the commands that need it as env: {DB_PASSWORD: {secret: db_password}}\n"
	if errOut != wantErr {
		t.Errorf("stderr %q, want %q", errOut, wantErr)
	}

	code, out, _ = run(t, "inventory", inv, "-o", "json")
	var got struct {
		Hosts    map[string]dag.Host       `json:"hosts"`
		Vars     map[string]map[string]any `json:"vars"`
		Ignored  []map[string]any          `json:"ignored"`
		Warnings []dag.Problem             `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != ExitOK {
		t.Fatalf("json: exit %d %v\n%s", code, err, out)
	}
	h := got.Hosts["10.0.0.11"]
	if !h.Become || h.BecomeUser != "app" || h.IdentityFile != "~/.ssh/fleet" || h.Vars["ntp_servers"] != `["0.pool.ntp.org","1.pool.ntp.org"]` || h.Vars["db_password"] != "" {
		t.Errorf("host %+v", h)
	}
	v := got.Vars["10.0.0.11"]
	if servers, _ := v["ntp_servers"].([]any); len(servers) != 2 || v["db_password"] != "***" || v["cfg"].(map[string]any)["tls"] != true {
		t.Errorf("vars %v", v)
	}
	if len(got.Ignored) != 1 || got.Ignored[0]["name"] != "ansible_python_interpreter" || len(got.Warnings) != 1 {
		t.Errorf("ignored %v, warnings %v", got.Ignored, got.Warnings)
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("-o json prints the secret:\n%s", out)
	}

	// validate warns too (a command that needs the secret takes it from
	// the executor's --secrets-dir), and takes the hosts named by their
	// addresses.
	comp := filepath.Join(dir, "c.yaml")
	os.WriteFile(comp, []byte("name: c\ninventory: hosts\nformulas:\n  - id: a\n    group: web\n    nodes: [{name: n, run: 'echo {{ index .Vars \"ntp_servers\" }}', env: {DB_PASSWORD: {secret: db_password}}}]\n"), 0o644)
	code, out, errOut = run(t, "validate", comp)
	if code != ExitOK || !strings.Contains(errOut, wantErr) || strings.Contains(errOut, "contains '.'") {
		t.Errorf("validate: exit %d\n%s%s", code, out, errOut)
	}
}
