package dag

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/template/parse"

	"github.com/gantry-dev/gantry/pkg/template"
)

// Outputs. A node declares the values its run hands on (outputs:
// [join_cmd, {name: token, secret: true}]); the run writes them to the
// file $GANTRY_OUTPUT names, and a later node or health gate reads one in
// a template: {{ output "cp/init" "join_cmd" }}, with a third word naming
// the host of a fanned-out producer. Validation finds every such read (the
// words must be quoted text), checks that the producer declares the
// output, and makes the reader depend on the producer: a node of the same
// formula (instance) waits for the producing node, another formula waits
// for the producer's formula. The planner renders a read as a marker
// (OutputRef.Marker) that the executor replaces with the value when the
// node's attempt starts; the value is never known to the planner.

// Output is one value a node's run hands to later nodes and formulas.
// A secret one is kept where only executors and health gates read it and
// is masked in every output line.
type Output struct {
	Name   string `json:"name"`
	Secret bool   `json:"secret,omitempty"`
}

// MaxOutputs bounds the outputs one node declares.
const MaxOutputs = 64

// MaxOutputName bounds an output's name.
const MaxOutputName = 64

// OutputNameRule is what an output's name looks like.
const OutputNameRule = "[A-Za-z_][A-Za-z0-9_]*, at most 64 characters"

// IsOutputName reports whether s is a valid output name (OutputNameRule).
func IsOutputName(s string) bool { return len(s) <= MaxOutputName && isEnvName(s) }

// OutputNames lists the names of outs.
func OutputNames(outs []Output) []string {
	names := make([]string, len(outs))
	for i, o := range outs {
		names[i] = o.Name
	}
	return names
}

// outputs reads a node's outputs: each a name, or {name, secret}.
func (d *decoder) outputs(v *Value, path string) []Output {
	if !d.want(v, path, KindList) {
		return nil
	}
	out := make([]Output, 0, len(v.Items))
	for i, it := range v.Items {
		ip := indexPath(path, i)
		d.mark(ip, it)
		switch it.Kind {
		case KindString:
			out = append(out, Output{Name: it.Scalar})
		case KindMap:
			var o Output
			if d.object(it, ip, fields{"name": d.str(&o.Name), "secret": d.boolean(&o.Secret)}) {
				out = append(out, o)
			}
		default:
			d.ps.add(ip, it.Line, CodeType, "expected an output name or {name: NAME, secret: true}, got %s", it.describe())
		}
	}
	return out
}

// outputDecls checks the outputs a node declares.
func (v *validator) outputDecls(path string, n *Node) {
	if len(n.Outputs) > MaxOutputs {
		v.bad(path, CodeTooLarge, "%d outputs: a node declares at most %d", len(n.Outputs), MaxOutputs)
		return
	}
	if len(n.Outputs) > 0 && strings.TrimSpace(n.Run) == "" {
		v.bad(path, CodeValue, "a node without run declares outputs: only its run writes them ($GANTRY_OUTPUT)")
		return
	}
	seen := make(map[string]bool, len(n.Outputs))
	for i, o := range n.Outputs {
		p := indexPath(path, i)
		switch {
		case o.Name == "":
			v.bad(p+".name", CodeRequired, "an output needs a name")
		case !IsOutputName(o.Name):
			v.bad(p+".name", CodeValue, "%q is not an output name (%s)", trunc(o.Name, 70), OutputNameRule)
		case seen[o.Name]:
			v.bad(p+".name", CodeDuplicate, "output %q is declared twice", o.Name)
		}
		seen[o.Name] = true
	}
}

// outputCall is one {{ output "formula/node" "name" ["host"] }} of a
// template, as written.
type outputCall struct {
	target, name, host string
	hasHost            bool
	// marker: a read rendered already (a composition loaded again: the
	// planner loads what the CLI rendered), by its marker.
	marker *OutputRef
}

// outputLink is a dependency a read of an output makes: node node of
// formula consumer (-1: its health gate) on node producerNode of formula
// producer.
type outputLink struct {
	consumer, node, producer int
	producerNode             string
}

// outputCalls finds the reads of a template: its output calls, and the
// markers of reads rendered already. A template that does not parse has
// no calls here: rendering reports it.
func outputCalls(s string) ([]outputCall, error) {
	var calls []outputCall
	refs, err := OutputRefsOf(s)
	if err != nil {
		return nil, err
	}
	for _, r := range refs {
		calls = append(calls, outputCall{target: r.Producer(), name: r.Name, marker: &r})
	}
	if !strings.Contains(s, "{{") || !strings.Contains(s, "output") {
		return calls, nil
	}
	t, err := template.ParseTree(s)
	if err != nil || t == nil {
		return calls, nil
	}
	return calls, walkOutputCalls(t.Root, false, &calls)
}

// errOutputDecides: an output's value cannot steer a template.
var errOutputDecides = fmt.Errorf("an output's value is known only when the node runs: it cannot decide an if, with or range (print it, or quote it with shq)")

// walkOutputCalls collects the output calls under n; inCond says n is
// the pipeline of an if, with or range.
func walkOutputCalls(n parse.Node, inCond bool, calls *[]outputCall) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := walkOutputCalls(c, inCond, calls); err != nil {
				return err
			}
		}
	case *parse.ActionNode:
		return walkOutputCalls(n.Pipe, inCond, calls)
	case *parse.IfNode:
		return walkBranch(&n.BranchNode, calls)
	case *parse.WithNode:
		return walkBranch(&n.BranchNode, calls)
	case *parse.RangeNode:
		return walkBranch(&n.BranchNode, calls)
	case *parse.PipeNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Cmds {
			if err := walkOutputCalls(c, inCond, calls); err != nil {
				return err
			}
		}
	case *parse.CommandNode:
		if id, ok := n.Args[0].(*parse.IdentifierNode); ok && id.Ident == "output" {
			if inCond {
				return errOutputDecides
			}
			c, err := readOutputCall(n.Args[1:])
			if err != nil {
				return err
			}
			*calls = append(*calls, c)
			return nil
		}
		for _, a := range n.Args {
			if err := walkOutputCalls(a, inCond, calls); err != nil {
				return err
			}
		}
	case *parse.ChainNode: // (output "f/n" "x").Field
		return walkOutputCalls(n.Node, inCond, calls)
	case *parse.IdentifierNode:
		if n.Ident == "output" { // passed on in a pipeline: {{ "x" | output }}
			return errOutputWords
		}
	}
	return nil
}

func walkBranch(b *parse.BranchNode, calls *[]outputCall) error {
	if err := walkOutputCalls(b.Pipe, true, calls); err != nil {
		return err
	}
	if err := walkOutputCalls(b.List, false, calls); err != nil {
		return err
	}
	return walkOutputCalls(b.ElseList, false, calls)
}

var errOutputWords = fmt.Errorf(`output takes two or three quoted words: {{ output "formula/node" "name" }}, or {{ output "formula/node" "name" "host" }} for a formula that runs on a group`)

func readOutputCall(args []parse.Node) (outputCall, error) {
	if len(args) < 2 || len(args) > 3 {
		return outputCall{}, errOutputWords
	}
	words := make([]string, len(args))
	for i, a := range args {
		s, ok := a.(*parse.StringNode)
		if !ok {
			return outputCall{}, errOutputWords
		}
		words[i] = s.Text
	}
	c := outputCall{target: words[0], name: words[1]}
	if len(words) == 3 {
		c.host, c.hasHost = words[2], true
	}
	return c, nil
}

// outputTemplates calls fn with every template of formula f that may read
// an output, its path and its node (-1: the health gate).
func outputTemplates(p string, f *Formula, fn func(path string, node int, s string)) {
	for j := range f.Nodes {
		n := &f.Nodes[j]
		np := indexPath(p+".nodes", j)
		fn(np+".run", j, n.Run)
		fn(np+".check", j, n.Check)
		fn(np+".delete", j, n.Delete)
		for _, k := range sortedKeys(n.Env) {
			if e := n.Env[k]; e.IsSecret() {
				fn(keyPath(np+".env", k)+".secret", j, e.Secret)
			} else {
				fn(keyPath(np+".env", k), j, e.Text)
			}
		}
	}
	if g := f.HealthGate; g != nil {
		fn(p+".health_gate.check", -1, g.Check)
		for _, k := range sortedKeys(g.Env) {
			if e := g.Env[k]; e.IsSecret() {
				fn(keyPath(p+".health_gate.env", k)+".secret", -1, e.Secret)
			} else {
				fn(keyPath(p+".health_gate.env", k), -1, e.Text)
			}
		}
	}
}

// outputReads checks every output a template reads and returns the
// dependencies the reads make. ids maps formula ids to their index.
func (v *validator) outputReads(ids map[string]int) []outputLink {
	var links []outputLink
	for i := range v.c.Formulas {
		f := &v.c.Formulas[i]
		v.noOutputsInFiles(indexPath("formulas", i), f)
		outputTemplates(indexPath("formulas", i), f, func(path string, node int, s string) {
			calls, err := outputCalls(s)
			if err != nil {
				v.bad(path, CodeTemplate, "template: %v", err)
				return
			}
			if len(calls) > 0 && strings.HasSuffix(path, ".secret") {
				v.bad(path, CodeValue, "a secret's name cannot be an output: read the output in env as text, or mark the output secret")
				return
			}
			for _, c := range calls {
				if l, ok := v.outputRead(path, i, node, c, ids); ok {
					links = append(links, l)
				}
			}
		})
	}
	return links
}

// noOutputsInFiles refuses a read of an output in a file's path or
// template (the two a template renders; content is written as it is):
// files are written before the run, and the executor fills outputs in
// scripts and env only.
func (v *validator) noOutputsInFiles(p string, f *Formula) {
	for j := range f.Nodes {
		for k, file := range f.Nodes[j].Files {
			fp := indexPath(indexPath(p+".nodes", j)+".files", k)
			for _, t := range []struct {
				field string
				text  *string
			}{{"path", &file.Path}, {"template", file.Template}} {
				if t.text == nil {
					continue
				}
				if calls, err := outputCalls(*t.text); err == nil && len(calls) > 0 {
					v.bad(fp+"."+t.field, CodeValue, "a file cannot read an output (files are written before the node's run; outputs are read by run, check, delete and env): read it in env and write the file in run")
				}
			}
		}
	}
}

// outputRead checks one read, by formula consumer's node (-1: its gate),
// and returns the dependency it makes.
func (v *validator) outputRead(path string, consumer, node int, c outputCall, ids map[string]int) (outputLink, bool) {
	what := fmt.Sprintf("output %q %q", trunc(c.target, 140), trunc(c.name, 70))
	fid, nname, ok := strings.Cut(c.target, "/")
	if !ok || !IsToken(fid) || !IsToken(nname) {
		v.bad(path, CodeValue, "%s: name the producing node as \"formula/node\"", what)
		return outputLink{}, false
	}
	pi, ok := ids[fid]
	if !ok {
		v.bad(path, CodeUnknownRef, "%s: unknown formula %q", what, fid)
		return outputLink{}, false
	}
	pf := &v.c.Formulas[pi]
	k := slices.IndexFunc(pf.Nodes, func(n Node) bool { return n.Name == nname })
	if k < 0 {
		v.bad(path, CodeUnknownRef, "%s: formula %q has no node %q", what, fid, nname)
		return outputLink{}, false
	}
	d := slices.IndexFunc(pf.Nodes[k].Outputs, func(o Output) bool { return o.Name == c.name })
	if d < 0 {
		v.bad(path, CodeUnknownRef, "%s: node %s does not declare output %q (%s)", what, c.target, c.name, declared(pf.Nodes[k].Outputs))
		return outputLink{}, false
	}
	if m := c.marker; m != nil {
		switch {
		case pf.Group != "":
			v.bad(path, CodeValue, "%s: formula %q runs on a group: a marker names one of its instances (<formula>-<host token>)", what, fid)
			return outputLink{}, false
		case m.Secret != pf.Nodes[k].Outputs[d].Secret:
			v.bad(path, CodeValue, "%s: the marker says secret %t, the output is declared secret %t", what, m.Secret, pf.Nodes[k].Outputs[d].Secret)
			return outputLink{}, false
		case m.Secret && m.Quote > 1:
			v.bad(path, CodeValue, "%s: a secret output is quoted with shq once at most", what)
			return outputLink{}, false
		}
	}
	if !v.outputHost(path, what, consumer, pi, c) {
		return outputLink{}, false
	}
	if pi == consumer && node == k {
		v.bad(path, CodeCycle, "%s: node %q reads its own output", what, nname)
		return outputLink{}, false
	}
	return outputLink{consumer: consumer, node: node, producer: pi, producerNode: nname}, true
}

func declared(outs []Output) string {
	if len(outs) == 0 {
		return "it declares none: add outputs: [NAME] to it"
	}
	return "it declares " + strings.Join(OutputNames(outs), ", ")
}

// outputHost checks the host a read names, or that none is needed: a
// producer that runs on a group is read on the consumer's own host unless
// a host is named.
func (v *validator) outputHost(path, what string, consumer, pi int, c outputCall) bool {
	pf, cf := &v.c.Formulas[pi], &v.c.Formulas[consumer]
	if pf.Group == "" {
		if c.hasHost && c.host != pf.Server {
			v.bad(path, CodeValue, "%s: formula %q runs on host %q only: drop the host", what, pf.ID, pf.Server)
			return false
		}
		return true
	}
	if _, ok := v.c.Groups[pf.Group]; !ok {
		return false // reported with the formula
	}
	if v.hostsOf == nil {
		v.hostsOf = groupHostsOnce(v.c)
	}
	hosts := v.hostsOf(pf.Group)
	if c.hasHost {
		if pi == consumer {
			v.bad(path, CodeValue, "%s: each instance of formula %q reads its own instance's outputs: drop the host", what, pf.ID)
			return false
		}
		if !slices.Contains(hosts, c.host) {
			v.bad(path, CodeUnknownRef, "%s: host %q is not a host of group %q, which formula %q runs on", what, c.host, pf.Group, pf.ID)
			return false
		}
		return true
	}
	if pi == consumer {
		return true
	}
	readers := []string{cf.Server}
	if cf.Group != "" {
		if _, ok := v.c.Groups[cf.Group]; !ok {
			return false
		}
		readers = v.hostsOf(cf.Group)
	}
	for _, h := range readers {
		if !slices.Contains(hosts, h) {
			v.bad(path, CodeValue, "%s: formula %q runs on each host of group %q, and host %q is not one of them: name the host to read, as in {{ output %q %q \"HOST\" }}",
				what, pf.ID, pf.Group, h, c.target, c.name)
			return false
		}
	}
	return true
}

// outputEdges are the dependencies output reads add, for the cycle checks:
// by consumer formula, the producer formulas; by node, the producing
// nodes of its formula.
type outputEdges struct {
	formulas map[int][]int
	nodes    map[*Node][]string
}

func newOutputEdges(c *Composition, links []outputLink) outputEdges {
	e := outputEdges{formulas: map[int][]int{}, nodes: map[*Node][]string{}}
	for _, l := range links {
		switch {
		case l.consumer != l.producer:
			if !slices.Contains(e.formulas[l.consumer], l.producer) {
				e.formulas[l.consumer] = append(e.formulas[l.consumer], l.producer)
			}
		case l.node >= 0:
			n := &c.Formulas[l.consumer].Nodes[l.node]
			if !slices.Contains(e.nodes[n], l.producerNode) {
				e.nodes[n] = append(e.nodes[n], l.producerNode)
			}
		}
	}
	return e
}

// linkOutputs adds the dependencies of a valid composition's output
// reads: a node on the producing node of its formula (to what it waited
// for already), a formula on the producer's formula (completed) unless it
// lists it.
func linkOutputs(c *Composition, links []outputLink) {
	e := newOutputEdges(c, links)
	for i := range c.Formulas {
		f := &c.Formulas[i]
		for _, pi := range e.formulas[i] {
			id := c.Formulas[pi].ID
			if !slices.ContainsFunc(f.DependsOn, func(d FormulaDep) bool { return d.Formula == id }) {
				f.DependsOn = append(f.DependsOn, FormulaDep{Formula: id, Condition: ConditionCompleted})
			}
		}
		deps := make([][]string, len(f.Nodes))
		for j := range f.Nodes {
			deps[j] = effectiveNodeDeps(f, j)
		}
		for j := range f.Nodes {
			n := &f.Nodes[j]
			extra := e.nodes[n]
			if len(extra) == 0 {
				continue
			}
			all := slices.Clone(deps[j])
			for _, d := range extra {
				if !slices.Contains(all, d) {
					all = append(all, d)
				}
			}
			n.DependsOn, n.dependsOnSet = all, true
		}
	}
}

// Markers. A read renders as "⟦output:FORMULA/NODE/NAME⟧", with
// ":secret" when the output is secret and ":qN" when shq quoted it N
// times, before the closing bracket. The executor puts the value in its
// place (see OutputRef).
const (
	markerStart = "⟦output:"
	markerEnd   = "⟧"
)

// OutputRef is a read of an output in a rendered command: Formula is the
// producer's formula (its instance, for a group formula), Quote how many
// times shq quoted the value in the template.
type OutputRef struct {
	Formula string
	Node    string
	Name    string
	Secret  bool
	Quote   int
}

// Producer is "formula/node".
func (o OutputRef) Producer() string { return o.Formula + "/" + o.Node }

// Marker is the text a read renders to.
func (o OutputRef) Marker() string {
	s := markerStart + o.Formula + "/" + o.Node + "/" + o.Name
	if o.Secret {
		s += ":secret"
	}
	if o.Quote > 0 {
		s += ":q" + strconv.Itoa(o.Quote)
	}
	return s + markerEnd
}

// HasOutputs says whether s holds an output marker (or what starts one).
func HasOutputs(s string) bool { return strings.Contains(s, markerStart) }

// ReplaceOutputs replaces every output marker of s with what fn returns
// for it. A marker that is not whole or not well-formed is an error.
func ReplaceOutputs(s string, fn func(OutputRef) (string, error)) (string, error) {
	if !HasOutputs(s) {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, markerStart)
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		rest := s[i+len(markerStart):]
		j := strings.Index(rest, markerEnd)
		if j < 0 {
			return "", fmt.Errorf("an output marker %q is not closed", trunc(s[i:], 60))
		}
		ref, err := parseMarker(rest[:j])
		if err != nil {
			return "", err
		}
		val, err := fn(ref)
		if err != nil {
			return "", err
		}
		b.WriteString(val)
		s = rest[j+len(markerEnd):]
	}
}

// OutputRefsOf lists the reads in s, each once.
func OutputRefsOf(s string) ([]OutputRef, error) {
	var refs []OutputRef
	_, err := ReplaceOutputs(s, func(r OutputRef) (string, error) {
		if !slices.Contains(refs, r) {
			refs = append(refs, r)
		}
		return "", nil
	})
	return refs, err
}

func parseMarker(body string) (OutputRef, error) {
	bad := fmt.Errorf("output marker %q is not well-formed", trunc(markerStart+body+markerEnd, 80))
	parts := strings.Split(body, ":")
	names := strings.Split(parts[0], "/")
	if len(names) != 3 || !IsToken(names[0]) || !IsToken(names[1]) || !IsOutputName(names[2]) {
		return OutputRef{}, bad
	}
	r := OutputRef{Formula: names[0], Node: names[1], Name: names[2]}
	for _, p := range parts[1:] {
		switch {
		case p == "secret" && !r.Secret:
			r.Secret = true
		case strings.HasPrefix(p, "q") && r.Quote == 0:
			n, err := strconv.Atoi(p[1:])
			if err != nil || n < 1 || n > maxQuote {
				return OutputRef{}, bad
			}
			r.Quote = n
		default:
			return OutputRef{}, bad
		}
	}
	return r, nil
}

// maxQuote bounds how many times a read may be quoted with shq.
const maxQuote = 8

// quoteOutputs marks every read in s, which shq quotes, as quoted once
// more.
func quoteOutputs(s string) (string, error) {
	return ReplaceOutputs(s, func(r OutputRef) (string, error) {
		r.Quote++
		switch {
		case r.Secret && r.Quote > 1:
			return "", fmt.Errorf("output %s %q is secret: quote it with shq once at most", r.Producer(), r.Name)
		case r.Quote > maxQuote:
			return "", fmt.Errorf("output %s %q is quoted with shq more than %d times", r.Producer(), r.Name, maxQuote)
		}
		return r.Marker(), nil
	})
}

// outputScope is what rendering the reads of one formula needs: the
// composition's formulas as written (by id), and the formula whose
// templates are rendered.
type outputScope struct {
	written map[string]*Formula
	f       *Formula
}

// Read renders a read as its marker (validation checked it).
func (sc *outputScope) Read(target, name string, host ...string) (string, error) {
	if sc.f == nil {
		return "", fmt.Errorf("output %q %q: outputs cannot be read here", target, name)
	}
	fid, node, _ := strings.Cut(target, "/")
	pf, ok := sc.written[fid]
	if !ok {
		return "", fmt.Errorf("output %q %q: unknown formula %q", target, name, fid)
	}
	k := slices.IndexFunc(pf.Nodes, func(n Node) bool { return n.Name == node })
	if k < 0 {
		return "", fmt.Errorf("output %q %q: formula %q has no node %q", target, name, fid, node)
	}
	d := slices.IndexFunc(pf.Nodes[k].Outputs, func(o Output) bool { return o.Name == name })
	if d < 0 {
		return "", fmt.Errorf("output %q %q: node %s does not declare it", target, name, target)
	}
	id := pf.ID
	if pf.Group != "" {
		h := sc.f.Server
		if len(host) > 0 {
			h = host[0]
		}
		id = InstanceID(pf.ID, h)
	}
	ref := OutputRef{Formula: id, Node: node, Name: name, Secret: pf.Nodes[k].Outputs[d].Secret}
	return ref.Marker(), nil
}

// Has says whether s holds a marker.
func (sc *outputScope) Has(s string) bool { return HasOutputs(s) }

// Quoted marks every read in s, which shq quoted, as quoted once more.
func (sc *outputScope) Quoted(s string) (string, error) { return quoteOutputs(s) }

// Check refuses a rendered template with a marker that is not
// well-formed (cut by a function). A whole one is a read validation
// checked, made now or in an earlier load of the composition.
func (sc *outputScope) Check(out string) error {
	_, err := ReplaceOutputs(out, func(OutputRef) (string, error) { return "", nil })
	return err
}
