package composition_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
)

// writeTree writes files (path: content) under a new directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestInventoryVarsFiles: group_vars/ and host_vars/ beside the inventory,
// with Ansible's precedence: all < parent group < child group, every
// group_vars file over every group's variables in the inventory, the host's
// own over those, host_vars over the host's own. What is expected is what
// ansible-inventory --list (ansible-core 2.14) printed for the same files.
func TestInventoryVarsFiles(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"inv/hosts": `[web]
web1 h_inline=host hv_over=inline
web2
[app:children]
web
[app:vars]
a=app_inline
g_over=app_inline
[web:vars]
w=web_inline
g_over=web_inline
all_over=web_inline
[all:vars]
all_inline=1
all_over=all_inline
`,
		"inv/group_vars/all.yml":         "all_over: gv_all\ngv: all\nonly_all: yes\n",
		"inv/group_vars/all.yaml":        "ignored: yes\n", // all.yml is found first
		"inv/group_vars/app/10-a.yml":    "g_over: gv_app\ngv: app\n",
		"inv/group_vars/app/20-b.json":   `{"gv": "app_json", "list": [1, 2], "n": 1e5}`,
		"inv/group_vars/app/.hidden.yml": "hidden: 1\n",
		"inv/group_vars/app/notes.txt":   "txt: 1\n",
		"inv/group_vars/app/sub/x.yml":   "sub: 1\n",
		"inv/group_vars/web":             "---\ngv: web\nw: gv_web\n",
		"inv/host_vars/web1.yml":         "hv_over: host_vars\nhv: 1\n",
		"inv/host_vars/web2/main.yml":    "hv: 2\n",
		"inv/host_vars/ghost.yml":        "ghost: 1\n",
		"inv/host_vars/web2/backup.yml~": "backup: 1\n",
	})
	inv, err := composition.ReadInventoryFile(filepath.Join(dir, "inv/hosts"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"web1":{"a":"app_inline","all_inline":1,"all_over":"gv_all","g_over":"gv_app","gv":"web","h_inline":"host","hv":1,"hv_over":"host_vars","list":[1,2],"n":100000.0,"only_all":true,"sub":1,"w":"gv_web"},"web2":{"a":"app_inline","all_inline":1,"all_over":"gv_all","g_over":"gv_app","gv":"web","hv":2,"list":[1,2],"n":100000.0,"only_all":true,"sub":1,"w":"gv_web"}}`
	if got := js(inv.Vars); got != want {
		t.Errorf("vars\n got %s\nwant %s", got, want)
	}
	if got := inv.Hosts["web2"].Vars["list"]; got != "[1,2]" {
		t.Errorf("a list as a host's var: %q", got)
	}
}

// TestInventoryDirectory: a directory is read as Ansible reads one: its
// files in name order (a later file's host variables over an earlier
// one's), subdirectories too, but not hidden files, backups, .ini, .md
// and the other extensions Ansible skips; group_vars beside the files.
// Ansible cannot read a --list JSON file (it runs scripts): gantry can.
func TestInventoryDirectory(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"inv/10-web.yml":              "web:\n  hosts:\n    web1: {a: yaml}\n",
		"inv/20-db":                   "[db]\ndb1\nweb1 a=ini\n",
		"inv/30-list.json":            `{"_meta": {"hostvars": {"j1": {"x": 1}, "stray": {"y": 2}}}, "json": {"hosts": ["j1"]}}`,
		"inv/hosts.ini":               "[skipped]\nini1\n",
		"inv/README.md":               "[skipped]\nmd1\n",
		"inv/.hidden":                 "[skipped]\nhid1\n",
		"inv/backup~":                 "[skipped]\nbak1\n",
		"inv/sub/40-more":             "[more]\nm1\n",
		"inv/group_vars/web.yml":      "gv: 1\n",
		"inv/sub/group_vars/more.yml": "subgv: 1\n",
	})
	inv, err := composition.ReadInventoryFile(filepath.Join(dir, "inv"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"db1":{},"j1":{"x":1},"m1":{},"web1":{"a":"ini","gv":1}}`
	if got := js(inv.Vars); got != want {
		t.Errorf("vars\n got %s\nwant %s", got, want)
	}
	groups := map[string]dag.Group{"db": {Hosts: []string{"db1", "web1"}}, "json": {Hosts: []string{"j1"}}, "more": {Hosts: []string{"m1"}}, "web": {Hosts: []string{"web1"}}}
	if !reflect.DeepEqual(inv.Groups, groups) {
		t.Errorf("groups %s", js(inv.Groups))
	}
}

// TestInventoryListJSON: the JSON of ansible-inventory --list (or of an
// inventory script): groups with hosts, vars and children, a group that is
// a list of hosts, and _meta.hostvars.
func TestInventoryListJSON(t *testing.T) {
	inv, err := composition.ReadInventory("inventory.json", []byte(`{
  "_meta": {"hostvars": {"web1": {"ansible_host": "10.0.0.1", "ntp": ["a", "b"], "n": 1.0}, "db1": {"ansible_user": "pg"}}},
  "all": {"children": ["ungrouped", "web", "db"]},
  "web": {"hosts": ["web1"], "vars": {"role": "web"}},
  "db": ["db1"],
  "prod": {"children": ["web", "db"], "vars": {"env": "prod"}}
}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]dag.Host{
		"web1": {Address: "10.0.0.1", Vars: map[string]string{"ntp": `["a","b"]`, "n": "1.0", "role": "web", "env": "prod"}, TypedVars: []string{"n", "ntp"}},
		"db1":  {Address: "db1", User: "pg", Vars: map[string]string{"env": "prod"}},
	}
	if !reflect.DeepEqual(inv.Hosts, want) {
		t.Errorf("hosts %s", js(inv.Hosts))
	}
	if g := inv.Groups["prod"].Hosts; !reflect.DeepEqual(g, []string{"db1", "web1"}) {
		t.Errorf("prod %v", g)
	}
	_, err = composition.ReadInventory("inventory.json", []byte(`{"_meta": {}, "web": {"hosts": "web1"}, "db": 5}`))
	got := problemLines(t, err)
	if len(got) != 2 || !strings.HasPrefix(got[1], `inventory.json:1: db: expected a group ({hosts, vars, children}) or a list of hosts, got number`) ||
		!strings.HasPrefix(got[0], `inventory.json:1: web.hosts: expected a list of host names, got string`) {
		t.Errorf("%q", got)
	}
}

// TestInventoryYAMLFlow: a YAML inventory written as one flow mapping
// starts with { as JSON does, and is read as YAML.
func TestInventoryYAMLFlow(t *testing.T) {
	inv, err := composition.ReadInventory("hosts.yml", []byte("{all: {hosts: {web1: {ansible_host: 10.0.0.1, on: yes}}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h := inv.Hosts["web1"]; h.Address != "10.0.0.1" || h.Vars["on"] != "true" {
		t.Errorf("web1 %+v", h)
	}
	_, err = composition.ReadInventory("hosts.json", []byte(`{"all": {"hosts": }`))
	if got := problemLines(t, err); len(got) != 1 || !strings.HasPrefix(got[0], "hosts.json:1: all.hosts: invalid JSON") {
		t.Errorf("%q", got)
	}
}

// TestInventoryWarnings: what gantry reads but does not take as written:
// a secret's value in the inventory (left out of the hosts' vars, never
// printed), an ansible-vault value or file, a key given twice.
func TestInventoryWarnings(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"inv/hosts.yml": `all:
  vars:
    db_password: hunter2
    api_token: "{{ vault_api_token }}"
    tls_key: /etc/ssl/k.pem
    session_secret: !vault |
      $ANSIBLE_VAULT;1.1;AES256
      6238
    port: 80
    port: 8080
  hosts:
    h1: {ansible_become_pass: s3cret, pin: 1234, passenger: true}
`,
		"inv/group_vars/all/vault.yml": "$ANSIBLE_VAULT;1.1;AES256\n3132\n",
	})
	inv, err := composition.ReadInventoryFile(filepath.Join(dir, "inv/hosts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range inv.Warnings {
		rel, _ := filepath.Rel(dir, w.File)
		got = append(got, rel+":"+itoa(w.Line)+": "+w.Path+": "+w.Message)
	}
	for _, w := range []string{
		"inv/group_vars/all/vault.yml:1: : the file is encrypted with ansible-vault: gantry does not decrypt it, and reads none of its variables; keep the value in a file NAME in the executor's --secrets-dir",
		"inv/hosts.yml:3: all.vars.db_password: db_password looks like a secret and holds its value: gantry leaves it out of the hosts' vars (they travel as plain text) and never prints it; keep the value in a file db_password in the executor's --secrets-dir and give it to the commands that need it as env: {DB_PASSWORD: {secret: db_password}}",
		"inv/hosts.yml:5: all.vars.tls_key: tls_key looks like a secret",
		"inv/hosts.yml:6: all.vars.session_secret: session_secret is encrypted with ansible-vault: gantry does not decrypt it, and leaves it out of the hosts' vars",
		`inv/hosts.yml:10: all.vars.port: key "port" given twice (first on line 9): the last one is kept, as in Ansible`,
		"inv/hosts.yml:12: all.hosts.h1.ansible_become_pass: ansible_become_pass looks like a secret",
	} {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("no warning %q in\n%s", w, strings.Join(got, "\n"))
		}
	}
	if len(got) != 6 {
		t.Errorf("%d warnings:\n%s", len(got), strings.Join(got, "\n"))
	}
	h := inv.Hosts["h1"]
	want := map[string]string{"api_token": "{{ vault_api_token }}", "port": "8080", "pin": "1234", "passenger": "true"}
	if !reflect.DeepEqual(h.Vars, want) {
		t.Errorf("vars %v", h.Vars)
	}
	shown := inv.Shown()["h1"]
	for _, k := range []string{"db_password", "tls_key", "session_secret", "ansible_become_pass"} {
		if shown[k] != composition.Masked {
			t.Errorf("%s shown as %v", k, shown[k])
		}
	}
	if b, _ := json.Marshal(inv.Shown()); strings.Contains(string(b), "hunter2") || strings.Contains(string(b), "s3cret") {
		t.Errorf("a secret shown: %s", b)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
