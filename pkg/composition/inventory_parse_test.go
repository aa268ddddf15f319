package composition

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestPyLiteral: INI values read as Python's ast.literal_eval reads them
// (what each gives was taken from Python 3.11, as Ansible 2.14 runs it):
// the value as JSON, TEXT when Python keeps the text, ERR for a literal
// Ansible cannot write out (a set, a complex number).
func TestPyLiteral(t *testing.T) {
	cases := []struct{ in, want string }{
		{"5", "5"},
		{"-5", "-5"},
		{"+5", "5"},
		{"- 5", "-5"},
		{"--5", "TEXT"},
		{"-(5)", "-5"},
		{"(5)", "5"},
		{"1_000", "1000"},
		{"0_0", "0"},
		{"0_7", "TEXT"},
		{"0755", "TEXT"},
		{"00", "0"},
		{"0x1F", "31"},
		{"0X_ff", "255"},
		{"0o17", "15"},
		{"0b101", "5"},
		{"0x", "TEXT"},
		{"1e3", "1000.0"},
		{"1E-3", "0.001"},
		{"1.", "1.0"},
		{".5", "0.5"},
		{"1.5e-7", "1.5e-07"},
		{"1_0.5", "10.5"},
		{"1e400", "\"inf\""},
		{"1e16", "1e+16"},
		{"1e15", "1000000000000000.0"},
		{"100.0", "100.0"},
		{"0.0001", "0.0001"},
		{"0.00001", "1e-05"},
		{"-0.0", "-0.0"},
		{"10.0.0.1", "TEXT"},
		{"1.31.12", "TEXT"},
		{"v1.2", "TEXT"},
		{"True", "true"},
		{"False", "false"},
		{"None", "null"},
		{"true", "TEXT"},
		{"yes", "TEXT"},
		{"-True", "TEXT"},
		{"'a b'", "\"a b\""},
		{"\"a b\"", "\"a b\""},
		{"'it''s'", "\"its\""},
		{"'a' 'b'", "\"ab\""},
		{"'a' \"b\"", "\"ab\""},
		{"b'x'", "\"x\""},
		{"b'a' b'b'", "\"ab\""},
		{"'a' b'b'", "TEXT"},
		{"f'x'", "TEXT"},
		{"u'x'", "\"x\""},
		{"r'a\\nb'", "\"a\\\\nb\""},
		{"'a\\nb'", "\"a\\nb\""},
		{"'\\x41\\101\\u00e9'", "\"AAé\""},
		{"'\\q'", "\"\\\\q\""},
		{"'''x'''", "\"x\""},
		{"'unterminated", "TEXT"},
		{"[1, 2]", "[1,2]"},
		{"[1, 2,]", "[1,2]"},
		{"[1, [2, [3]]]", "[1,[2,[3]]]"},
		{"[]", "[]"},
		{"()", "[]"},
		{"(1)", "1"},
		{"(1,)", "[1]"},
		{"(1, 2)", "[1,2]"},
		{"1, 2", "[1,2]"},
		{"1,", "[1]"},
		{"1,,", "TEXT"},
		{"{}", "{}"},
		{"{'a': 1}", "{\"a\":1}"},
		{"{'a': 1, 'a': 2}", "{\"a\":2}"},
		{"{1: 'x'}", "{\"1\":\"x\"}"},
		{"{True: 'x', None: 'y'}", "{\"null\":\"y\",\"true\":\"x\"}"},
		{"{'a': [1, {'b': None}]}", "{\"a\":[1,{\"b\":null}]}"},
		{"{ 'root': 'HDD', 'rack': 'mon-rackkkk' }", "{\"rack\":\"mon-rackkkk\",\"root\":\"HDD\"}"},
		{"['/dev/sda', '/dev/sdb']", "[\"/dev/sda\",\"/dev/sdb\"]"},
		{"{'a' 1}", "TEXT"},
		{"[1 2]", "TEXT"},
		{"abc", "TEXT"},
		{"abc # comment", "TEXT"},
		{"5 # comment", "5"},
		{"'x' # comment", "\"x\""},
		{"# only", "TEXT"},
		{"1+2", "TEXT"},
		{"ab=c", "TEXT"},
		{"$HOME", "TEXT"},
		{"/usr/bin/python3", "TEXT"},
		{"-o ProxyJump=x", "TEXT"},
		{"{{ x }}", "TEXT"},
		{"x.y", "TEXT"},
		{"0.1", "0.1"},
		{"3.0", "3.0"},
		{"1j", "ERR"},
		{"1+2j", "ERR"},
		{"{1, 2}", "ERR"},
		{"set()", "ERR"},
		{"...", "TEXT"},
		{"{[1]: 2}", "ERR"},
		{"[" + strings.Repeat("[", 70) + strings.Repeat("]", 71), "ERR"},
	}
	for _, tc := range cases {
		got := "TEXT"
		v, err := pyLiteral(tc.in)
		switch {
		case err == nil:
			got = jsonText(v)
		case !errors.Is(err, errNotLiteral):
			got = "ERR"
		}
		if got != tc.want {
			t.Errorf("pyLiteral(%q) = %s (%v), want %s", tc.in, got, err, tc.want)
		}
	}
}

// TestShlexSplit: host lines split as Python's shlex.split(line,
// comments=True) splits them (taken from Python 3.11).
func TestShlexSplit(t *testing.T) {
	cases := []struct{ in, want string }{
		{"web1 ansible_host=10.0.0.1 ansible_port=2222 foo=\"a b\"", "[\"web1\", \"ansible_host=10.0.0.1\", \"ansible_port=2222\", \"foo=a b\"]"},
		{"a 'b c' d", "[\"a\", \"b c\", \"d\"]"},
		{"a \"b \\\" c\" d", "[\"a\", \"b \\\" c\", \"d\"]"},
		{"a \"b \\x\" d", "[\"a\", \"b \\\\x\", \"d\"]"},
		{"a b\\ c", "[\"a\", \"b c\"]"},
		{"a b#c d", "[\"a\", \"b\"]"},
		{"a #c", "[\"a\"]"},
		{"a 'b#c'", "[\"a\", \"b#c\"]"},
		{"x=\"\"", "[\"x=\"]"},
		{"x=''", "[\"x=\"]"},
		{"a \"b", "ERR"},
		{"a 'b", "ERR"},
		{"a\\", "ERR"},
		{"\"a\\\\b\"", "[\"a\\\\b\"]"},
		{"mysecret=\\\"'03#pa33w0rd'\\\"", "[\"mysecret=\\\"03#pa33w0rd\\\"\"]"},
		{"tab\tsep", "[\"tab\", \"sep\"]"},
		{"osd0 osd_crush_location=\"{ 'root': 'HDD', 'host': 'osd0' }\"", "[\"osd0\", \"osd_crush_location={ 'root': 'HDD', 'host': 'osd0' }\"]"},
		{"a\"b\"c", "[\"abc\"]"},
		{"a'b'c", "[\"abc\"]"},
	}
	for _, tc := range cases {
		got := "ERR"
		if words, err := shlexSplit(tc.in); err == nil {
			b, _ := json.Marshal(words)
			got = strings.ReplaceAll(string(b), `","`, `", "`)
		}
		if got != tc.want {
			t.Errorf("shlexSplit(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestYAML11Scalars: plain scalars typed as Ansible's YAML loader (PyYAML,
// YAML 1.1) types them, as ansible-inventory 2.14 printed them.
func TestYAML11Scalars(t *testing.T) {
	cases := []struct{ in, want string }{
		{"yes", "true"}, {"Yes", "true"}, {"YES", "true"}, {"yEs", `"yEs"`}, {"on", "true"}, {"off", "false"},
		{"NO", "false"}, {"True", "true"}, {"y", `"y"`}, {"n", `"n"`}, {`"yes"`, `"yes"`}, {"'no'", `"no"`},
		{"0755", "493"}, {"0o755", `"0o755"`}, {"1e3", `"1e3"`}, {"1.0e+3", "1000.0"}, {"1_000", "1000"},
		{"190:20:30", "685230"}, {"0x1F", "31"}, {"-0x10", "-16"}, {"0b101", "5"}, {"+1", "1"}, {"09", `"09"`},
		{"1.", "1.0"}, {"3.0", "3.0"}, {"1_0.5_0", "10.5"}, {"1.5e-7", "1.5e-07"}, {"0.00001", "1e-05"},
		{"1000000000000000000.0", "1e+18"}, {"12345678901234567890123", "12345678901234567890123"},
		{"1e400", `"1e400"`}, {".inf", `"inf"`}, {"-.inf", `"-inf"`}, {".NaN", `"nan"`},
		{"~", "null"}, {"null", "null"}, {"", "null"}, {"2001-12-14", `"2001-12-14"`},
		{"!unsafe '{{ x }}'", `"{{ x }}"`}, {"!!str yes", `"yes"`}, {"!!int 7", "7"},
		{"10.0.0.1", `"10.0.0.1"`}, {"v1.31.12+k3s1", `"v1.31.12+k3s1"`}, {"[a, yes, 1]", `["a",true,1]`},
		{"{a: off}", `{"a":false}`},
	}
	for _, tc := range cases {
		root, vault, _, err := parseInventoryYAML([]byte("v: " + tc.in + "\n"))
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		r := &invReader{vault: vault}
		if got := jsonText(r.typedValue(root.Get("v"))); got != tc.want {
			t.Errorf("%s = %s, want %s", tc.in, got, tc.want)
		}
	}
	root, vault, _, err := parseInventoryYAML([]byte("v: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3038\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := &invReader{vault: vault}
	if v, ok := r.typedValue(root.Get("v")).(Vault); !ok {
		t.Errorf("!vault: %#v", v)
	}
}

// TestExpandHostPattern: host patterns as Ansible's parse_address and
// ranges read them.
func TestExpandHostPattern(t *testing.T) {
	cases := []struct{ in, want string }{
		{"web1", `["web1"] <nil>`},
		{"web1:2222", `["web1"] 2222`},
		{"10.0.0.5", `["10.0.0.5"] <nil>`},
		{"10.0.0.5:2200", `["10.0.0.5"] 2200`},
		{"fe80::1", `["fe80::1"] <nil>`},
		{"[fe80::1]:2222", `["fe80::1"] 2222`},
		{"web[01:03].example.com", `["web01.example.com","web02.example.com","web03.example.com"] <nil>`},
		{"db-[a:c]:22", `["db-a","db-b","db-c"] 22`},
		{"n[1:10:4]", `["n1","n5","n9"] <nil>`},
		{"10.0.0.[1:3]:2200", `["10.0.0.1","10.0.0.2","10.0.0.3"] 2200`},
		{"web-:22", `["web-:22"] <nil>`}, // not a host name: the pattern as written
		{"Web1.Example.COM", `["Web1.Example.COM"] <nil>`},
		{"h:0", `["h"] <nil>`},
		{"h:99999", `host "h:99999": port 99999 is not a port (1-65535)`},
		{"a[3:1]", `host range "a[3:1]": [3:1]: the start is after the end`},
		{"b[1:2", `host range "b[1:2": '[' without ']'`},
		{"g]", `host range "g]": ']' without '['`},
	}
	for _, tc := range cases {
		names, port, err := expandHostPattern(tc.in)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			b, _ := json.Marshal(names)
			got = string(b) + " " + fmtPort(port)
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.in, got, tc.want)
		}
	}
}

func fmtPort(p any) string {
	if p == nil {
		return "<nil>"
	}
	return varText(p)
}

// TestProxyJumpFor: a ProxyCommand refused names the ProxyJump that
// reaches the same jump host.
func TestProxyJumpFor(t *testing.T) {
	cases := []struct{ in, want string }{
		{"ssh -W %h:%p -q ops@bastion", "-o ProxyJump=ops@bastion (or -J ops@bastion)"},
		{"ssh -W %h:%p -p 2222 -l ops bastion.example.com", "-o ProxyJump=ops@bastion.example.com:2222"},
		{"/usr/bin/ssh -i ~/.ssh/k -o StrictHostKeyChecking=yes bastion nc %h %p", "-o ProxyJump=bastion "},
		{"ssh -p22 203.0.113.5 -W %h:%p", "-o ProxyJump=203.0.113.5 "},
		{"nc -X connect -x proxy:3128 %h %p", "-o ProxyJump=JUMPHOST (or -J JUMPHOST)"},
	}
	for _, tc := range cases {
		if got := proxyJumpFor(tc.in); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestDetectInventory: the format is told by what a file holds.
func TestDetectInventory(t *testing.T) {
	cases := []struct {
		doc  string
		want inventoryFormat
	}{
		{"[web]\nweb1\n", formatINI},
		{"# hosts\n; more\nweb1 ansible_host=10.0.0.1 # note: x\n", formatINI},
		{"10.0.0.1:2222\n", formatINI},
		{"[fe80::1]:22\n", formatINI},
		{"all:\n  hosts:\n", formatYAMLInv},
		{"# c\n---\nweb: {}\n", formatYAMLInv},
		{"web.example.com:\n", formatYAMLInv},
		{"- web1\n", formatYAMLInv},
		{"  {\"_meta\": {}}", formatJSONInv},
		{"", formatYAMLInv},
	}
	for _, tc := range cases {
		if got := detectInventory([]byte(tc.doc)); got != tc.want {
			t.Errorf("%q: %d, want %d", tc.doc, got, tc.want)
		}
	}
}

// FuzzInventoryINI: any bytes read as an INI inventory come back as
// problems, each with the file and a line of it, or as hosts and groups:
// groups of known hosts, sorted, and typed variables for every host that
// write out as JSON.
func FuzzInventoryINI(f *testing.F) {
	for _, seed := range []string{
		"h0\n[web]\nweb1 ansible_host=10.0.0.1 ansible_port=2222 foo=\"a b\"\n[web:vars]\nx=[1, {'a': None}]\n",
		"[web]\nweb[01:20] l=\"[1, 'x']\"\ndb-[a:c]:2200\nn[1:10:2]\n[all:vars]\nansible_ssh_common_args='-J web01'\n",
		"[p:children]\nc\n[c:vars]\nv=1\n[c]\nh ansible_connection=local\n[g:vars]\nansible_group_priority=3\n[g]\nh\n",
		"; c\n# c\n[a:children]\nb\n[b:children]\na\n[a]\nh\n",
		"[web]\nweb1 s=\"{1,2}\" t='unterminated\n[x y]\n---\n",
		"10.0.0.1\n[fe80::1]:22\nfe80::2 ansible_become=true ansible_become_method=su\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := strings.Count(string(data), "\n") + strings.Count(string(data), "\r") + 1
		r := newInvReader()
		r.cur = "hosts.ini"
		r.readINI(data)
		inv := r.finish()
		if ps := r.sorted(); len(ps) > 0 {
			for _, p := range ps {
				if p.File != "hosts.ini" || p.Line < 1 || p.Line > lines || p.Message == "" {
					t.Fatalf("problem without its file or line: %+v", p)
				}
			}
			return
		}
		for name, h := range inv.Hosts {
			if _, ok := inv.Vars[name]; !ok {
				t.Fatalf("host %s has no typed vars", name)
			}
			if h.Via != "" {
				if _, ok := inv.Hosts[h.Via]; !ok || h.Via == name {
					t.Fatalf("host %s via %q", name, h.Via)
				}
			}
			if _, err := json.Marshal(inv.Shown()[name]); err != nil {
				t.Fatalf("host %s: vars do not write as JSON: %v", name, err)
			}
		}
		for name, g := range inv.Groups {
			if name == "all" || name == "ungrouped" || len(g.Hosts) == 0 || !slices.IsSorted(g.Hosts) {
				t.Fatalf("group %s: %v", name, g.Hosts)
			}
			for _, h := range g.Hosts {
				if _, ok := inv.Hosts[h]; !ok {
					t.Fatalf("group %s: unknown host %s", name, h)
				}
			}
		}
	})
}
