package composition_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
)

// TestInventoryINI: INI inventories read as Ansible reads them. The
// variables expected are what ansible-inventory --list (ansible-core
// 2.14) printed for the same documents.
func TestInventoryINI(t *testing.T) {
	cases := []struct {
		name   string
		doc    string
		vars   string // every host's variables, as JSON
		groups map[string]dag.Group
	}{
		{
			name: "ungrouped and all, children declared later, priority, ranges with a port, comments",
			doc: `h0
[web]
web1 ansible_host=10.0.0.1 ansible_port=2222 foo="a b"
h0
[all]
h2
[ungrouped]
h3
[all:vars]
x=1
[ungrouped:vars]
u=yes
[db:vars]
dbv='text'  ; not a comment
[top:children]
mid
[mid:children] # a comment
db
[db]
; a comment
db[01:02]:2200 role=db
[top:vars]
v=top
[other]
db01
[other:vars]
v=other
ansible_group_priority=10
`,
			vars: `{"db01":{"ansible_port":2200,"dbv":"'text'  ; not a comment","role":"db","v":"other","x":1},"db02":{"ansible_port":2200,"dbv":"'text'  ; not a comment","role":"db","v":"top","x":1},"h0":{"x":1},"h2":{"u":"yes","x":1},"h3":{"u":"yes","x":1},"web1":{"ansible_host":"10.0.0.1","ansible_port":2222,"foo":"a b","x":1}}`,
			groups: map[string]dag.Group{"web": {Hosts: []string{"h0", "web1"}}, "db": {Hosts: []string{"db01", "db02"}},
				"mid": {Hosts: []string{"db01", "db02"}}, "top": {Hosts: []string{"db01", "db02"}}, "other": {Hosts: []string{"db01"}}},
		},
		{
			name: "values are Python literals, on host lines and in :vars sections alike",
			doc: `[web]
web1 n=5 f=1.5 t=True none=None s='05' l="[1, 'x']" d="{'a': 1}" o=0755 h=0x10 tup=1,2 word=abc q="a b" e="" c=1#comment
web2 ip=10.0.0.1 ver=1.31.12 neg=-3 big=123456789012345678901234567890 sci=1e3 bool=true path=/usr/bin/python3 esc="a\"b" single='a"b'
[web:vars]
x=FALSE
y=True
z=5 # comment
w="quoted"
v=abc # comment
l=[1,2]
sp = 10 
eq=a=b
`,
			vars:   `{"web1":{"c":1,"d":{"a":1},"e":"","eq":"a=b","f":1.5,"h":16,"l":[1,"x"],"n":5,"none":null,"o":"0755","q":"a b","s":"05","sp":10,"t":true,"tup":[1,2],"v":"abc # comment","w":"quoted","word":"abc","x":"FALSE","y":true,"z":5},"web2":{"big":123456789012345678901234567890,"bool":"true","eq":"a=b","esc":"a\"b","ip":"10.0.0.1","l":[1,2],"neg":-3,"path":"/usr/bin/python3","sci":1000.0,"single":"a\"b","sp":10,"v":"abc # comment","ver":"1.31.12","w":"quoted","x":"FALSE","y":true,"z":5}}`,
			groups: map[string]dag.Group{"web": {Hosts: []string{"web1", "web2"}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := composition.ReadInventory("hosts.ini", []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := js(inv.Vars); got != tc.vars {
				t.Errorf("vars\n got %s\nwant %s", got, tc.vars)
			}
			if !reflect.DeepEqual(inv.Groups, tc.groups) {
				t.Errorf("groups\n got %s\nwant %s", js(inv.Groups), js(tc.groups))
			}
		})
	}
}

// TestInventoryINIHosts: an INI inventory's connection variables on
// gantry's hosts.
func TestInventoryINIHosts(t *testing.T) {
	inv, err := composition.ReadInventory("hosts.ini", []byte(`[web]
web1 ansible_host=10.0.0.1 ansible_port=2222 ansible_user=ops ansible_become=yes ansible_become_user=app ansible_ssh_private_key_file=~/.ssh/k
web2 ansible_ssh_host=10.0.0.2 ansible_ssh_port=22 ansible_ssh_user=legacy ansible_become_method=sudo
ctl ansible_connection=local
10.0.0.9:2200
[bastions]
bastion ansible_host=203.0.113.5
[web:vars]
ansible_ssh_common_args='-o ProxyJump=bastion'
ansible_python_interpreter=/usr/bin/python3
app_port=8080
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]dag.Host{
		"web1":     {Address: "10.0.0.1:2222", User: "ops", Via: "bastion", Become: true, BecomeUser: "app", IdentityFile: "~/.ssh/k", Vars: map[string]string{"app_port": "8080"}, TypedVars: []string{"app_port"}},
		"web2":     {Address: "10.0.0.2:22", User: "legacy", Via: "bastion", Vars: map[string]string{"app_port": "8080"}, TypedVars: []string{"app_port"}},
		"ctl":      {Transport: dag.TransportLocal, Vars: map[string]string{"app_port": "8080"}, TypedVars: []string{"app_port"}},
		"10.0.0.9": {Address: "10.0.0.9:2200", Via: "bastion", Vars: map[string]string{"app_port": "8080"}, TypedVars: []string{"app_port"}},
		"bastion":  {Address: "203.0.113.5"},
	}
	if !reflect.DeepEqual(inv.Hosts, want) {
		t.Errorf("hosts\n got %s\nwant %s", js(inv.Hosts), js(want))
	}
	if got := inv.Ignored["web1"]; !reflect.DeepEqual(got, []string{"ansible_python_interpreter"}) {
		t.Errorf("ignored %v", got)
	}
	// ctl runs on the executor: the ssh arguments of its group are not
	// acted on.
	if got := inv.IgnoredCounts(); len(got) != 2 || got[0] != (composition.IgnoredVar{Name: "ansible_python_interpreter", Hosts: 4}) ||
		got[1] != (composition.IgnoredVar{Name: "ansible_ssh_common_args", Hosts: 1}) {
		t.Errorf("ignored counts %v", got)
	}
}

// TestInventoryINIProblems: every bad line of an INI inventory is reported
// with its file and line, all at once.
func TestInventoryINIProblems(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want []string
	}{
		{"sections", "[web\n[web:hostz]\nh\n[web server]\nh2\n[ok]\nh3\n", []string{
			`hosts.ini:1: [ungrouped] [web: host range "[web": '[' without ']'`,
			`hosts.ini:2: [web:hostz]: section [web:hostz] has an unknown type "hostz": use [web], [web:vars] or [web:children]`,
			`hosts.ini:4: [web:hostz]: bad section header [web server]: a section is [group], [group:vars] or [group:children], with no spaces`,
		}},
		{"host lines", "[web]\nweb1 foo\nweb2 foo=\"unterminated\nweb3:\nweb4 s={1,2} c=1+2j\nweb5 bar=\\\n---\n", []string{
			`hosts.ini:2: [web] web1: expected key=value after the host, got "foo" (quote a value that has spaces: key="a b")`,
			`hosts.ini:3: [web]: cannot split the host line "web2 foo=\"unterminated": no closing quotation`,
			`hosts.ini:4: [web] web3:: host "web3:" ends in ':', which is kept for a port (host:2222)`,
			`hosts.ini:5: [web] web4 s: value {1,2} is a Python set, which Ansible cannot write out either: write a list [a, b]`,
			`hosts.ini:5: [web] web4 c: value 1+2j is a complex number, which Ansible cannot write out either`,
			`hosts.ini:6: [web]: cannot split the host line "web5 bar=\\": no character after the last backslash`,
			`hosts.ini:7: [web] ---: host "---": a line --- starts a YAML document, not an INI host`,
		}},
		{"vars and children sections", "[web]\nh\n[web:vars]\nnovalue\n=x\n[web:children]\na b\n[ghost:vars]\nx=1\n[p:children]\nnever\n[g:vars]\nansible_group_priority=high\n[g]\nh\n", []string{
			`hosts.ini:4: [web:vars]: expected key=value in [web:vars], got "novalue"`,
			`hosts.ini:5: [web:vars]: a variable needs a name before '=', got "=x"`,
			`hosts.ini:7: [web:children]: expected a group name in [web:children], got "a b"`,
			`hosts.ini:8: [ghost:vars]: section [ghost:vars] is for a group that is never declared: add a section [ghost]`,
			`hosts.ini:11: [p:children] never: group never is listed as a child but never declared: add a section [never] or [never:children]`,
			`hosts.ini:13: [g:vars] ansible_group_priority: ansible_group_priority must be a whole number, got "high"`,
		}},
		{"what gantry refuses, at the line that says it", `[web]
web1 ansible_become_method=su
web2 ansible_ssh_common_args='-o ProxyCommand="ssh -W %h:%p -q ops@bastion"'
web3 ansible_connection=winrm
[all:vars]
ansible_ssh_extra_args=-o StrictHostKeyChecking=no
`, []string{
			`hosts.ini:2: [web] web1 ansible_become_method: ansible_become_method "su" is not supported: gantry becomes another user with sudo -n (passwordless sudo) only; write ansible_become_method: sudo, or leave it out`,
			`hosts.ini:3: [web] web2 ansible_ssh_common_args: ansible_ssh_common_args: ProxyCommand "ssh -W %h:%p -q ops@bastion" is refused: gantry runs no proxy command, it jumps through a host of the inventory itself: write -o ProxyJump=ops@bastion (or -J ops@bastion) instead, bastion being a host of the inventory (by name or ansible_host)`,
			`hosts.ini:4: [web] web3 ansible_connection: ansible_connection "winrm" is not supported: gantry reaches hosts over ssh or local`,
			`hosts.ini:6: [all:vars] ansible_ssh_extra_args: ansible_ssh_extra_args: StrictHostKeyChecking=no is refused: gantry never connects to a host whose key it has not checked: the executor checks every host key against its known_hosts (--known-hosts); remove the option, and add each host's key once you have checked it (ssh-keyscan -p PORT HOST >> ~/.ssh/known_hosts)`,
		}},
		{"not UTF-8", "[web]\nweb1\nweb2 x=\xff\n", []string{`hosts.ini:3: [web]: the line is not UTF-8 text`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := composition.ReadInventory("hosts.ini", []byte(tc.doc))
			got := problemLines(t, err)
			if len(got) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
					t.Errorf("no problem %q in\n%s", w, strings.Join(got, "\n"))
				}
			}
		})
	}
}
