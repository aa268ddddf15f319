package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
)

// examples/compose/kubernetes.yaml is the kubernetes example rehearsed on
// the compose targets: it must keep the same DAG (formulas, servers,
// dependencies and conditions, gates, node names, node order, levels) so
// that `make compose-test` exercises what the real example would do.
func TestComposeExampleHasTheKubernetesDAG(t *testing.T) {
	shape := func(file string) ([]string, *dag.Composition) {
		c, err := composition.LoadFile(examples + file)
		if err != nil {
			t.Fatal(err)
		}
		p, err := dag.NewPlan(c)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range p.Formulas {
			s := f.ID + " on " + f.Server
			for _, d := range f.DependsOn {
				s += " after " + d.Formula + ":" + string(d.Condition)
			}
			if f.Gate != nil {
				s += " gated"
			}
			out = append(out, s)
			for _, n := range f.Nodes {
				s := "  " + f.ID + "/" + n.Name
				for _, d := range n.DependsOn {
					s += " after " + d
				}
				out = append(out, s)
			}
			out = append(out, "  order "+strings.Join(f.Order, ","))
		}
		return out, c
	}
	real, rc := shape("kubernetes.yaml")
	rehearsal, cc := shape("compose/kubernetes.yaml")
	if !reflect.DeepEqual(real, rehearsal) {
		t.Errorf("the compose example's DAG differs from examples/kubernetes.yaml:\nreal:\n%v\ncompose:\n%v", real, rehearsal)
	}
	if len(rc.Hosts) != len(cc.Hosts) {
		t.Errorf("hosts: %d and %d", len(rc.Hosts), len(cc.Hosts))
	}
	for name, want := range map[string]string{"cp-0": "target-1:22", "worker-0": "target-2:22", "worker-1": "target-3:22"} {
		if got := cc.Hosts[name].Address; got != want {
			t.Errorf("compose example: host %s at %q, want %q (docker-compose.yml's targets)", name, got, want)
		}
	}
}
