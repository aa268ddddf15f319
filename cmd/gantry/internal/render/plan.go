// Package render draws a dag.Plan as text, JSON, Graphviz dot or Mermaid.
package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/dag"
)

// Renderer writes a plan in one format.
type Renderer func(w io.Writer, p *dag.Plan) error

// Renderers maps each --format to its renderer.
var Renderers = map[string]Renderer{
	"text":    Text,
	"json":    JSON,
	"dot":     Dot,
	"mermaid": Mermaid,
}

// JSON writes the plan as indented JSON, safe on a terminal (see
// termsafe.JSON).
func JSON(w io.Writer, p *dag.Plan) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a command's &&, < and > as they are written
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s\n", termsafe.JSON(bytes.TrimRight(b.Bytes(), "\n")))
	return err
}

// Text writes the plan for people: levels, formulas with their
// prerequisites and gates, and each formula's node order. What the
// composition says (names, commands, checks) is shown with control
// characters escaped (see termsafe): a plan cannot drive the terminal.
func Text(w io.Writer, p *dag.Plan) error {
	var b strings.Builder
	line := func(format string, args ...any) {
		b.WriteString(termsafe.Line(fmt.Sprintf(format, args...)))
		b.WriteString("\n")
	}
	line("%s", p)
	if len(p.Targets) > 0 {
		line("targets: %s", strings.Join(p.Targets, ", "))
		if len(p.NotSelected) > 0 {
			line("not selected: %s", strings.Join(p.NotSelected, ", "))
		}
	}
	line("on_failure: %s", p.OnFailure)
	if p.Timeout > 0 {
		line("timeout: %s (the whole run, from its acceptance)", p.Timeout)
	}
	for l, level := range p.Levels {
		fmt.Fprintf(&b, "\nlevel %d\n", l)
		for _, i := range level {
			f := &p.Formulas[i]
			mark := ""
			if f.Target {
				mark = " [target]"
			}
			parallel := ""
			if f.MaxParallel > 1 {
				parallel = fmt.Sprintf(" (up to %d nodes at once)", f.MaxParallel)
			}
			line("  %s on %s%s%s%s", f.ID, f.Server, instanceText(f), mark, parallel)
			if len(f.DependsOn) > 0 {
				deps := make([]string, len(f.DependsOn))
				for k, d := range f.DependsOn {
					deps[k] = fmt.Sprintf("%s %s", d.Formula, d.Condition)
				}
				line("    after: %s", strings.Join(deps, ", "))
			}
			if f.Timeout > 0 {
				line("    timeout: %s (from its dispatch)", f.Timeout)
			}
			for k, j := range f.NodeOrder {
				n := &f.Nodes[j]
				after := ""
				if len(n.DependsOn) > 0 {
					after = fmt.Sprintf(" (after %s)", strings.Join(n.DependsOn, ", "))
				}
				head := fmt.Sprintf("    %d. %s%s", k+1, n.Name, after)
				if n.Command == "" {
					line("%s -- nothing to run for %s", head, p.Operation)
					continue
				}
				script(&b, head, n.Command, 100)
			}
			if g := f.Gate; g != nil && strings.Contains(strings.Trim(g.Check, "\r\n"), "\n") {
				script(&b, fmt.Sprintf("    gate (%s, %d retries)", g.Timeout, g.Retries), g.Check, 60)
			} else if g != nil {
				line("    gate: %s (%s, %d retries)", oneLine(g.Check, 60), g.Timeout, g.Retries)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// script writes "head: command" for a one-line command (cut to n bytes),
// and a command of several lines as a block under "head:", each line as
// it is written, indented under the head: a script reads as it will run.
// Control characters are shown escaped.
func script(b *strings.Builder, head, command string, n int) {
	command = strings.Trim(command, "\r\n")
	if !strings.Contains(command, "\n") {
		b.WriteString(termsafe.Line(head) + ": " + oneLine(command, n) + "\n")
		return
	}
	indent := strings.Repeat(" ", len(head)-len(strings.TrimLeft(head, " "))+3)
	b.WriteString(termsafe.Line(head) + ":\n")
	for _, l := range strings.Split(command, "\n") {
		l = strings.TrimRight(l, " \t\r")
		if l == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString(indent + termsafe.Line(l) + "\n")
	}
}

// instanceText names what a fanned-out formula is an instance of.
func instanceText(f *dag.PlannedFormula) string {
	in := f.Instance
	switch {
	case in == nil:
		return ""
	case in.Batches > 0:
		return fmt.Sprintf(" (%s, batch %d/%d)", in.Of, in.Batch, in.Batches)
	}
	return " (" + in.Of + ")"
}

// oneLine is s on one line of at most n bytes: its runs of white space
// made one space, its control characters shown escaped, and cut (at a
// rune) with "..." when longer.
func oneLine(s string, n int) string {
	s = termsafe.Line(strings.Join(strings.Fields(s), " "))
	if len(s) > n {
		cut := n - 3
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// Dot writes the plan as a Graphviz digraph: a cluster per formula holding
// its nodes, and an edge between formulas for each dependency, labelled
// with its condition. Gated formulas have a double border.
func Dot(w io.Writer, p *dag.Plan) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n  compound=true;\n  rankdir=TB;\n  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n", p.Workflow)
	for i := range p.Formulas {
		f := &p.Formulas[i]
		fmt.Fprintf(&b, "  subgraph %q {\n    label=%q;\n", "cluster_"+f.ID, f.ID+" @ "+f.Server+instanceText(f))
		if f.Gate != nil {
			fmt.Fprintf(&b, "    peripheries=2; tooltip=%q;\n", "health gate: "+oneLine(f.Gate.Check, 80))
		}
		if f.Target {
			b.WriteString("    color=blue;\n")
		}
		for _, j := range f.NodeOrder {
			fmt.Fprintf(&b, "    %q [label=%q];\n", f.ID+"/"+f.Nodes[j].Name, f.Nodes[j].Name)
		}
		for j := range f.Nodes {
			for _, d := range f.Nodes[j].DependsOn {
				fmt.Fprintf(&b, "    %q -> %q;\n", f.ID+"/"+d, f.ID+"/"+f.Nodes[j].Name)
			}
		}
		b.WriteString("  }\n")
	}
	for i := range p.Formulas {
		f := &p.Formulas[i]
		for _, d := range f.Deps {
			from := &p.Formulas[d.Formula]
			last := from.Nodes[from.NodeOrder[len(from.NodeOrder)-1]].Name
			first := f.Nodes[f.NodeOrder[0]].Name
			style := ""
			if d.Condition == dag.ConditionHealthy {
				style = ", style=bold"
			}
			fmt.Fprintf(&b, "  %q -> %q [ltail=%q, lhead=%q, label=%q%s];\n",
				from.ID+"/"+last, f.ID+"/"+first, "cluster_"+from.ID, "cluster_"+f.ID, string(d.Condition), style)
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Mermaid writes the plan as a Mermaid flowchart for Markdown: a subgraph
// per formula, its nodes inside, and labelled edges between formulas.
func Mermaid(w io.Writer, p *dag.Plan) error {
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	for i := range p.Formulas {
		f := &p.Formulas[i]
		label := f.ID + " @ " + f.Server + instanceText(f)
		if f.Gate != nil {
			label += " ✚ gate"
		}
		fmt.Fprintf(&b, "  subgraph F%d[\"%s\"]\n", i, mermaidText(label))
		if f.MaxParallel == 1 {
			b.WriteString("    direction TB\n")
		}
		for _, j := range f.NodeOrder {
			fmt.Fprintf(&b, "    F%dN%d[\"%s\"]\n", i, j, mermaidText(f.Nodes[j].Name))
		}
		for j := range f.Nodes {
			for _, k := range f.Nodes[j].Deps {
				fmt.Fprintf(&b, "    F%dN%d --> F%dN%d\n", i, k, i, j)
			}
		}
		b.WriteString("  end\n")
	}
	for i := range p.Formulas {
		for _, d := range p.Formulas[i].Deps {
			fmt.Fprintf(&b, "  F%d -->|%s| F%d\n", d.Formula, d.Condition, i)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mermaidText is s for a Mermaid label: quotes and angle brackets as
// entities, control characters shown escaped.
func mermaidText(s string) string {
	return strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;").Replace(termsafe.Line(s))
}
