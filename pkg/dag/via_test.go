package dag_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// viaDoc is a composition with the given hosts (a JSON object body) and
// one formula on the first of them, "a".
func viaDoc(hosts string) string {
	return `{"name":"t","hosts":{` + hosts + `},"formulas":[{"id":"f","server":"a","nodes":[{"name":"n","run":"true"}]}]}`
}

// chainHosts is h0 via h1 via ... via h<n>, h<n> reached directly, and
// "a" via h0.
func chainHosts(n int) string {
	var b strings.Builder
	b.WriteString(`"a":{"address":"10.0.0.99","via":"h0"}`)
	for i := 0; i <= n; i++ {
		via := ""
		if i < n {
			via = fmt.Sprintf(`,"via":"h%d"`, i+1)
		}
		fmt.Fprintf(&b, `,"h%d":{"address":"10.0.0.%d"%s}`, i, i+1, via)
	}
	return b.String()
}

func TestViaValidation(t *testing.T) {
	type want struct {
		path string
		code dag.Code
		msg  string
	}
	cases := []struct {
		name string
		doc  string
		want []want // nil: valid
	}{
		{"one jump host", viaDoc(`"a":{"address":"10.0.0.1","via":"b"},"b":{"address":"203.0.113.5:2222"}`), nil},
		{"chained", viaDoc(`"a":{"address":"10.0.0.1","via":"b"},"b":{"address":"10.0.1.1","via":"c"},"c":{"address":"203.0.113.5"}`), nil},
		{"jump host with explicit ssh", viaDoc(`"a":{"address":"10.0.0.1","via":"b"},"b":{"address":"10.0.1.1","transport":"ssh"}`), nil},
		{"eight jump hosts", viaDoc(chainHosts(7)), nil},
		{"nine jump hosts", viaDoc(chainHosts(8)),
			[]want{{"hosts.a.via", dag.CodeValue, "reached through 9 jump hosts (a -> h0 -> h1 -> h2 -> h3 -> h4 -> h5 -> h6 -> h7 -> h8); at most 8"}}},
		{"unknown jump host", viaDoc(`"a":{"address":"10.0.0.1","via":"bastion"}`),
			[]want{{"hosts.a.via", dag.CodeUnknownRef, `via "bastion" is not listed in hosts`}}},
		{"jump host local", viaDoc(`"a":{"address":"10.0.0.1","via":"b"},"b":{"transport":"local"}`),
			[]want{{"hosts.a.via", dag.CodeValue, `via "b" has transport local: a jump host must be reached over ssh`}}},
		{"local host with via", viaDoc(`"a":{"transport":"local","via":"b"},"b":{"address":"10.0.0.2"}`),
			[]want{{"hosts.a.via", dag.CodeValue, `host "a" has transport local, which cannot have via`}}},
		{"via itself", viaDoc(`"a":{"address":"10.0.0.1","via":"a"}`),
			[]want{{"hosts.a.via", dag.CodeCycle, `host "a" is reached via itself`}}},
		{"two-host cycle named once", viaDoc(`"a":{"address":"10.0.0.1","via":"b"},"b":{"address":"10.0.0.2","via":"a"}`),
			[]want{{"hosts.a.via", dag.CodeCycle, "via cycle between hosts: a -> b -> a"}}},
		{"three-host cycle at its first name", viaDoc(`"a":{"address":"10.0.0.1","via":"x"},"x":{"address":"10.0.0.2","via":"c"},"c":{"address":"10.0.0.3","via":"b"},"b":{"address":"10.0.0.4","via":"c"}`),
			[]want{{"hosts.b.via", dag.CodeCycle, "via cycle between hosts: b -> c -> b"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.doc)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("valid composition rejected: %v", err)
				}
				return
			}
			got := problemsOf(t, err)
			var vias []dag.Problem
			for _, p := range got {
				if strings.HasSuffix(p.Path, ".via") {
					vias = append(vias, p)
				}
			}
			if len(vias) != len(tc.want) {
				t.Fatalf("got %d via problems, want %d:\n%s", len(vias), len(tc.want), fmtProblems(got))
			}
			for i, w := range tc.want {
				p := vias[i]
				if p.Path != w.path || p.Code != w.code || !strings.Contains(p.Message, w.msg) {
					t.Errorf("problem %s [%s], want %s [%s] %q", p, p.Code, w.path, w.code, w.msg)
				}
				if p.Line == 0 {
					t.Errorf("problem without a line: %s", p)
				}
			}
		})
	}
}

func TestViaChain(t *testing.T) {
	hosts := map[string]dag.Host{
		"web":     {Address: "10.0.0.1:22", Via: "inner"},
		"inner":   {Address: "10.0.1.1:22", Via: "bastion"},
		"bastion": {Address: "203.0.113.5:22"},
		"loop-a":  {Address: "10.0.2.1:22", Via: "loop-b"},
		"loop-b":  {Address: "10.0.2.2:22", Via: "loop-a"},
		"lost":    {Address: "10.0.3.1:22", Via: "nowhere"},
	}
	c := &dag.Composition{Hosts: hosts}
	for _, tc := range []struct {
		host string
		want []string
	}{
		{"web", []string{"bastion", "inner"}},
		{"inner", []string{"bastion"}},
		{"bastion", nil},
		{"not-a-host", nil},
		{"loop-a", []string{"loop-b"}}, // rejected by Validate; still bounded
		{"lost", nil},
	} {
		if got := dag.ViaChain(c, tc.host); !slices.Equal(got, tc.want) {
			t.Errorf("ViaChain(%s) = %q, want %q", tc.host, got, tc.want)
		}
	}
}
