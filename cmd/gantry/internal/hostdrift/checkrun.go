package hostdrift

import (
	"errors"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// CheckRun turns a composition document (its parse tree, changed in
// place) into the workflow that asks its hosts: operation check, under
// the composition's own name (so it waits for the composition's running
// nodes on their hosts and the state records its checks), every formula
// at once (no depends_on between formulas, no health gate, no rollout
// batches: a check changes nothing, so nothing waits for another's),
// one attempt per node, on_failure continue (one host's failure does not
// keep the others from being asked), and the run's timeout. The
// executors' limits (per host, limits:, max_parallel) bound how much runs
// at once, as for any run. selected are the formulas the composition's
// own targets select (nil when it has none): the check run asks exactly
// those.
func CheckRun(root *dag.Value, selected []string, timeout time.Duration) error {
	if root == nil || root.Kind != dag.KindMap {
		return errors.New("the composition is not a mapping")
	}
	null := &dag.Value{Kind: dag.KindNull}
	root.Set("operation", str(string(dag.OpCheck)))
	root.Set("on_failure", str(string(dag.OnFailureContinue)))
	root.Set("retry", &dag.Value{Kind: dag.KindMap, Keys: []string{"max_attempts"}, Vals: []*dag.Value{{Kind: dag.KindNumber, Scalar: "1"}}})
	root.Set("timeout", str(timeout.String()))
	root.Set("reset", null)
	root.Set("rerun", null)
	if selected != nil {
		root.Set("targets", dag.Strings(selected))
	}
	formulas := root.Get("formulas")
	if formulas == nil || formulas.Kind != dag.KindList {
		return errors.New("the composition has no list of formulas")
	}
	for _, f := range formulas.Items {
		if f.Kind != dag.KindMap {
			continue // Load refused it already
		}
		f.Set("depends_on", null)
		f.Set("health_gate", null)
		f.Set("rollout", null)
		if nodes := f.Get("nodes"); nodes != nil && nodes.Kind == dag.KindList {
			for _, n := range nodes.Items {
				if n.Kind == dag.KindMap {
					n.Set("retry", null)
				}
			}
		}
	}
	return nil
}

func str(s string) *dag.Value { return &dag.Value{Kind: dag.KindString, Scalar: s} }
