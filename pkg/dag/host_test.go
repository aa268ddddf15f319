package dag_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Host names may be IPv4 addresses and fully qualified names; each has a
// host token without dots, what subjects and the state's keys carry.
func TestHostNameAndToken(t *testing.T) {
	long := strings.Repeat("a", 63)
	cases := []struct {
		name    string
		ok      bool
		token   string
		problem string // substring, when not ok
	}{
		{"cp-0", true, "cp-0", ""},
		{"web_1", true, "web_1", ""},
		{"10.0.0.5", true, "10_0_0_5", ""},
		{"192.168.100.254", true, "192_168_100_254", ""},
		{"web-1.example.com", true, "web-1_example_com", ""},
		{"ip-10-0-0-5.eu-west-1.compute.internal", true, "ip-10-0-0-5_eu-west-1_compute_internal", ""},
		{long + "." + long + "." + long + "." + strings.Repeat("b", 61), true, long + "_" + long + "_" + long + "_" + strings.Repeat("b", 61), ""},
		{"", false, "", "must not be empty"},
		{long + "." + long + "." + long + "." + strings.Repeat("b", 62), false, "", "is 254 characters; host names are at most 253"},
		{long + "a.example.com", false, "", "is 64 characters; names are at most 63"},
		{"Web1.example.com", false, "", `part "Web1" contains upper-case 'W'`},
		{"web..example.com", false, "", "empty part between dots"},
		{".example.com", false, "", "empty part between dots"},
		{"example.com.", false, "", "empty part between dots"},
		{"web.-x.com", false, "", `part "-x" starts with '-'`},
		{"2001:db8::1", false, "", "IPv6 addresses are not host names"},
		{"web 1", false, "", `contains ' ', which would break NATS subjects`},
		{"web*.com", false, "", `contains '*'`},
		{"a>b", false, "", `contains '>'`},
		{"wéb.com", false, "", "non-ASCII"},
		{"_web", false, "", "starts with '_'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := dag.IsHostName(tc.name); got != tc.ok {
				t.Fatalf("IsHostName(%q) = %v, want %v", tc.name, got, tc.ok)
			}
			p := dag.HostNameProblem(tc.name)
			if !tc.ok {
				if p == "" || !strings.Contains(p, tc.problem) {
					t.Fatalf("HostNameProblem(%q) = %q, want it to contain %q", tc.name, p, tc.problem)
				}
				return
			}
			if p != "" {
				t.Fatalf("HostNameProblem(%q) = %q for a host name", tc.name, p)
			}
			tok := dag.HostToken(tc.name)
			if tok != tc.token || !dag.IsHostToken(tok) || strings.Contains(tok, ".") {
				t.Fatalf("HostToken(%q) = %q (a host token: %v), want %q", tc.name, tok, dag.IsHostToken(tok), tc.token)
			}
			if dag.HostToken(tok) != tok {
				t.Fatalf("HostToken is not stable on its own result %q", tok)
			}
			// Every name without a dot is its own token, as before dots.
			if !strings.Contains(tc.name, ".") && tok != tc.name {
				t.Fatalf("a plain name %q changed to %q", tc.name, tok)
			}
		})
	}
	for _, s := range []string{"10.0.0.5", "a*b", "", "A", strings.Repeat("a", 254), "-a"} {
		if dag.IsHostToken(s) {
			t.Errorf("IsHostToken(%q) = true", s)
		}
	}
}

// Two names of one composition with the same host token are rejected,
// naming both; names with dots are otherwise hosts like any.
func TestHostTokenCollisions(t *testing.T) {
	doc := func(hosts string) string {
		return `{"name":"t","hosts":{` + hosts + `},"formulas":[{"id":"a","server":"10.0.0.5","nodes":[{"name":"n","run":"echo {{ .Host }}"}]}]}`
	}
	c, err := load(t, doc(`"10.0.0.5":{"address":"127.0.0.1"},"web-1.example.com":{"address":"10.0.0.11"},"web_1":{"address":"10.0.0.12"}`))
	if err != nil {
		t.Fatalf("dotted host names rejected: %v", err)
	}
	if got := c.Formulas[0].Nodes[0].Run; got != "echo 10.0.0.5" {
		t.Errorf(".Host is %q, want the name itself", got)
	}
	cases := []struct {
		hosts string
		path  string
		msg   string
	}{
		{`"10.0.0.5":{"address":"a"},"10_0_0_5":{"address":"b"}`, `hosts.10_0_0_5`,
			`host names "10.0.0.5" and "10_0_0_5" both have the host token 10_0_0_5 (in subjects: decky.10_0_0_5.lifecycle; a dot is written '_'): rename one`},
		{`"10.0.0.5":{"address":"a"},"web.1":{"address":"b"},"web_1":{"address":"c"}`, `hosts.web_1`,
			`host names "web.1" and "web_1" both have the host token web_1`},
		{`"10.0.0.5":{"address":"a"},"a.b_c":{"address":"b"},"a_b.c":{"address":"c"}`, `hosts["a_b.c"]`,
			`host names "a.b_c" and "a_b.c" both have the host token a_b_c`},
		{`"10.0.0.5":{"address":"a"},"Web.example.com":{"address":"b"}`, `hosts["Web.example.com"]`,
			`host name part "Web" contains upper-case 'W'`},
	}
	for _, tc := range cases {
		_, err := load(t, doc(tc.hosts))
		if err == nil {
			t.Fatalf("%s: accepted", tc.hosts)
		}
		ps := problemsOf(t, err)
		if len(ps) != 1 || ps[0].Path != tc.path || !strings.Contains(ps[0].Message, tc.msg) {
			t.Errorf("%s: got %v, want one problem at %s: %s", tc.hosts, ps, tc.path, tc.msg)
		}
	}
}

// A group formula's instance on a dotted host is named with the host
// token, so formula ids stay tokens; targets name it so, and rollouts
// chain the instances by those names.
func TestInstancesOnDottedHosts(t *testing.T) {
	c, err := load(t, `{"name":"t","hosts":{
		"10.0.0.5":{"address":"127.0.0.1","labels":{"role":"web"}},
		"web-1.example.com":{"address":"127.0.0.1","labels":{"role":"web"}}},
		"groups":{"web":{"labels":{"role":"web"}}},
		"targets":["app-web-1_example_com"],
		"formulas":[{"id":"app","group":"web","rollout":{"batch":1},"nodes":[{"name":"n","run":"echo {{ .Host }}"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	var ids, servers []string
	for _, f := range c.Formulas {
		ids, servers = append(ids, f.ID), append(servers, f.Server)
	}
	if want := []string{"app-10_0_0_5", "app-web-1_example_com"}; !slices.Equal(ids, want) {
		t.Fatalf("instances %v, want %v", ids, want)
	}
	if want := []string{"10.0.0.5", "web-1.example.com"}; !slices.Equal(servers, want) {
		t.Fatalf("servers %v, want the names %v", servers, want)
	}
	if d := c.Formulas[1].DependsOn; len(d) != 1 || d[0].Formula != "app-10_0_0_5" {
		t.Errorf("second batch waits for %v", d)
	}
	if got := c.Formulas[1].Nodes[0].Run; got != "echo web-1.example.com" {
		t.Errorf("run %q", got)
	}
	if !slices.Equal(c.Targets, []string{"app-web-1_example_com"}) {
		t.Errorf("targets %v", c.Targets)
	}
}

// FuzzHostName: any string is a host name whose token is a host token,
// or has a problem that says why; nothing panics.
func FuzzHostName(f *testing.F) {
	for _, s := range []string{"10.0.0.5", "web-1.example.com", "cp-0", "a..b", "2001:db8::1", "Web.x", "", ".", "a.", "a_b.c", "é.com", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ok, p := dag.IsHostName(s), dag.HostNameProblem(s)
		if ok != (p == "") {
			t.Fatalf("%q: IsHostName %v, problem %q", s, ok, p)
		}
		if !ok {
			return
		}
		tok := dag.HostToken(s)
		if !dag.IsHostToken(tok) || dag.HostToken(tok) != tok || len(tok) != len(s) {
			t.Fatalf("%q: token %q", s, tok)
		}
		if !strings.Contains(s, ".") && (tok != s || !dag.IsToken(s)) {
			t.Fatalf("%q: a plain host name must be a token and its own host token", s)
		}
	})
}
