package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// checkEdit makes a composition document an operation: check, with diff:
// true for --diff (gantry submit --check [--diff]).
func checkEdit(diff bool) composition.Edit {
	return func(root *dag.Value) {
		if root.Kind != dag.KindMap {
			return // the decoder says what is wrong
		}
		setKey(root, "operation", &dag.Value{Kind: dag.KindString, Scalar: string(dag.OpCheck)})
		if diff {
			setKey(root, "diff", &dag.Value{Kind: dag.KindBool, Scalar: "true"})
		}
	}
}

// setKey sets key of a mapping, over what it held.
func setKey(m *dag.Value, key string, v *dag.Value) {
	if i := slices.Index(m.Keys, key); i >= 0 {
		m.Vals[i] = v
		return
	}
	m.Keys, m.Vals = append(m.Keys, key), append(m.Vals, v)
}

// printFiles prints what an event or a document says of a node's files,
// one line each, with its diff (operation check with diff) indented
// under it; what hosts said is escaped.
func printFiles(w io.Writer, indent string, files []events.FileResult) {
	for _, f := range files {
		line := indent + f.Path + " " + string(f.Status)
		if len(f.Differs) > 0 {
			line += " (" + strings.Join(f.Differs, ", ") + ")"
		}
		if f.SHA256 != "" {
			line += " sha256:" + shortHash(f.SHA256)
		}
		if f.Error != "" {
			line += ": " + firstLine(f.Error)
		}
		fmt.Fprintln(w, termsafe.Line(line))
		for l := range strings.SplitSeq(strings.TrimSuffix(f.Diff, "\n"), "\n") {
			if f.Diff != "" {
				fmt.Fprintln(w, termsafe.Line(indent+"  "+l))
			}
		}
	}
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// printNodeFiles prints, below a workflow's table, the files of each node
// that has some: formula/node, then a line a file.
func printNodeFiles(w io.Writer, d *events.WorkflowDoc) {
	var keys []string
	for id, f := range d.Formulas {
		for n, nd := range f.Nodes {
			if len(nd.Files) > 0 {
				keys = append(keys, id+"/"+n)
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	fmt.Fprintln(w, "FILES")
	for _, k := range keys {
		id, n, _ := strings.Cut(k, "/")
		fmt.Fprintln(w, termsafe.Line("  "+k+" on "+d.Formulas[id].Host))
		printFiles(w, "    ", d.Formulas[id].Nodes[n].Files)
	}
}
