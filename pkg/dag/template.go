package dag

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
)

// Command templates are text/template over the host a command runs on
// (TemplateData). Anyone who may send a composition (a viewer asking for
// drift too) makes the planner or the state-store render it, so what a
// composition's templates may cost is bounded: one template renders to at
// most MaxRendered bytes; all of a composition's templates together render
// at most MaxRenderedTotal bytes and run at most MaxTemplateSteps steps; a
// template loops only over the composition's own data (a map), never over
// a number; and templates may not define or call other templates, which
// would let a few lines call each other 2^40 times. Every function a
// template may call is gantry's (templateFuncs), so each charges for the
// bytes it reads or makes before it does the work, and none makes more
// than MaxRendered bytes.

// MaxRendered bounds what one command template may render to, and what
// one function call in a template may return.
const MaxRendered = 256 << 10

// MaxRenderedTotal bounds what all of one composition's templates render
// to together.
const MaxRenderedTotal = 128 << 20

// MaxTemplateSteps bounds the work of rendering all of one composition's
// templates. A step is a node of a template run once (an action, a piece
// of text, an argument), a node of a loop's body run once more, a key of a
// map a loop goes over; a function call, a nested pipeline, a copied var
// and bytes cost the steps below. A step costs about the same whatever the
// data: 30,000,000 take two or three seconds on a slow machine. A fleet of
// 5,000 hosts, 5 nodes each, each node writing an env file from 30 vars in
// a loop, takes 24,000,000.
const MaxTemplateSteps = 30_000_000

// renderSteps is what running a template costs besides its nodes, and
// callSteps what calling a function does (reflection), in steps.
const (
	renderSteps = 20
	callSteps   = 10
	// nestedSteps is what a parenthesized pipeline costs besides its
	// calls: evaluating it as an argument goes through text/template's
	// whole pipeline machinery again.
	nestedSteps = 30
	// copySteps is what copying a var into a host's own vars costs.
	copySteps = 10
)

// Bytes count as steps by what is done with them: made (formatted into a
// new string), written to the rendered command, or compared and hashed.
const (
	madePerStep     = 32
	writtenPerStep  = 128
	comparedPerStep = 256
)

// errStepsSpent: the composition's templates took more than
// MaxTemplateSteps steps.
var errStepsSpent = fmt.Errorf("template: rendering this composition's templates takes more than %d steps or %d MiB (a loop over large vars, or long templates on many hosts): make them simpler", MaxTemplateSteps, MaxRenderedTotal>>20)

// loopFunc is the function the renderer puts at the end of every range
// pipeline: it checks what the range goes over and charges its steps.
const loopFunc = "gantry_loop"

// renderer renders one composition's templates, each text parsed once,
// all of them within MaxTemplateSteps.
type renderer struct {
	parsed   map[string]*parsedTemplate
	typed    map[string]*parsedTemplate // parsed for hosts with typed vars
	decoded  map[string]any             // typed vars' values by their text
	steps    int                        // steps left
	bytes    int                        // bytes left to render
	reported bool                       // errStepsSpent was reported
	// failed holds the paths with a template problem reported: a group
	// formula's instances share their paths, and one problem a path is
	// enough.
	failed map[string]bool
	hosts  map[string]TemplateData // each host's, made once
	shared TemplateVars            // the composition's vars, for hosts with none of their own
	// outputs renders the output reads of the formula being rendered
	// (nil: none may be read).
	outputs *outputScope
}

// data is what the templates of host name see, made once a host. A host
// with vars of its own (or a composition with extra vars) gets a copy of
// the composition's with the others over them, charged copySteps an
// entry; the others share the composition's.
func (r *renderer) data(c *Composition, name string, h Host) (TemplateData, error) {
	if d, ok := r.hosts[name]; ok {
		return d, nil
	}
	if len(h.Vars) > 0 || len(c.ExtraVars) > 0 {
		if err := r.spend(copySteps * (len(c.Vars) + len(h.Vars) + len(c.ExtraVars))); err != nil {
			return TemplateData{}, err
		}
	}
	if r.shared == nil {
		r.shared = make(TemplateVars, len(c.Vars))
		for k, v := range c.Vars {
			r.shared[k] = v
		}
	}
	d := templateData(c, name, h, r.shared)
	for _, k := range h.TypedVars {
		text, own := h.Vars[k]
		if _, over := c.ExtraVars[k]; !own || over {
			continue // an extra var is text
		}
		v, err := r.typedVar(k, text)
		if err != nil {
			return TemplateData{}, err
		}
		d.Vars[k], d.typed = v, true
	}
	r.hosts[name] = d
	return d, nil
}

type parsedTemplate struct {
	t     *template.Template
	nodes int // steps of one run, loop bodies once
	err   error
}

func newRenderer() *renderer {
	return &renderer{parsed: map[string]*parsedTemplate{}, typed: map[string]*parsedTemplate{}, decoded: map[string]any{}, steps: MaxTemplateSteps, bytes: MaxRenderedTotal,
		failed: map[string]bool{}, hosts: map[string]TemplateData{}}
}

func (r *renderer) spend(n int) error {
	r.steps -= n
	if r.steps < 0 {
		return errStepsSpent
	}
	return nil
}

// spendBytes charges n bytes, perStep of them a step.
func (r *renderer) spendBytes(n, perStep int) error { return r.spend(n/perStep + 1) }

// made charges a function's result of n bytes before it is made: more
// than MaxRendered is refused.
func (r *renderer) made(what string, n int) error {
	if n > MaxRendered {
		return fmt.Errorf("%s would make more than %d bytes", what, MaxRendered)
	}
	return r.spendBytes(n, madePerStep)
}

// maxProblemText bounds the text of a template problem (an error quoting
// a long var name would be as long).
const maxProblemText = 512

// report adds err, rendering the template at path of formula f, to ps:
// once a path (a group formula's instances share theirs), and the steps
// spent once a composition.
func (r *renderer) report(ps *problems, path string, f *Formula, err error) {
	spent := errors.Is(err, errStepsSpent)
	if r.failed[path] || (spent && r.reported) {
		return
	}
	r.failed[path], r.reported = true, r.reported || spent
	msg := err.Error()
	if len(msg) > maxProblemText {
		msg = strings.ToValidUTF8(msg[:maxProblemText], "") + "…"
	}
	if f.Instance != nil {
		msg += fmt.Sprintf(" (for host %s)", f.Server)
	}
	ps.add(path, 0, CodeTemplate, "%s", msg)
}

// render executes s as a template; text without "{{" is returned as is.
// A missing variable is an error, not "<no value>".
func (r *renderer) render(s string, data TemplateData) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, r.checkMarkers(s)
	}
	pt := r.parse(s, data.typed)
	if pt.err != nil {
		return "", pt.err
	}
	if err := r.spend(renderSteps + pt.nodes); err != nil {
		return "", err
	}
	b := &limitedBuffer{max: MaxRendered, r: r}
	if err := pt.t.Execute(b, data); err != nil {
		if errors.Is(err, errStepsSpent) {
			return "", errStepsSpent
		}
		return "", fmt.Errorf("template: %s", cleanExecErr(err.Error()))
	}
	if err := r.checkMarkers(b.String()); err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	return b.String(), nil
}

// parse parses s once, and once more for hosts with typed vars (typed),
// whose actions print a typed list or mapping as its JSON.
func (r *renderer) parse(s string, typed bool) *parsedTemplate {
	parsed := r.parsed
	if typed {
		parsed = r.typed
	}
	if pt, ok := parsed[s]; ok {
		return pt
	}
	pt := &parsedTemplate{}
	parsed[s] = pt
	t, err := template.New("").Funcs(r.funcs()).Option("missingkey=error").Parse(s)
	switch {
	case err != nil:
		pt.err = fmt.Errorf("template: %s", strings.TrimPrefix(err.Error(), "template: :"))
	case len(t.Templates()) != 1 || t.Tree == nil:
		pt.err = errors.New("template: define and block are not allowed: write the command out")
	default:
		pt.t = t
		pt.nodes, pt.err = guardLoops(t.Tree.Root)
		if typed {
			printTyped(t.Tree.Root)
		}
	}
	return pt
}

// funcs are the functions templates may call: shq, output, gantry_loop, and in
// place of text/template's own, those that read or make text in
// proportion to their arguments, each charging for it first (funcs.go).
func (r *renderer) funcs() template.FuncMap {
	return template.FuncMap{
		loopFunc: r.loop, printFunc: r.printed, "shq": r.shq, "index": r.index, "fromjson": r.fromjson, "output": r.output,
		"printf": r.printf, "print": r.print, "println": r.println,
		"html": r.escaper("html", 6, template.HTMLEscaper), "js": r.escaper("js", 6, template.JSEscaper),
		"urlquery": r.escaper("urlquery", 3, template.URLQueryEscaper),
		"eq":       r.eq, "ne": r.ne, "lt": r.lt, "le": r.le, "gt": r.gt, "ge": r.ge,
	}
}

// loop lets a range go over a map (of the composition's data), charging
// each key's run of the body, and the sorting of the keys that
// text/template does each time: about log2(keys) comparisons a key; or
// over a list (made by fromjson), charging each item's run. Anything
// else, a number above all (text/template would count up to it), is
// refused.
func (r *renderer) loop(body int, v any) (any, error) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Invalid:
		return v, nil // nothing to go over
	case reflect.Map:
		n, logN, keyBytes := rv.Len(), bits.Len(uint(rv.Len())), 0
		for it := rv.MapRange(); it.Next(); {
			keyBytes += sizeOf(it.Key())
		}
		if err := r.spend(n * (body + 2 + logN)); err != nil {
			return nil, err
		}
		return v, r.spendBytes(keyBytes*logN, comparedPerStep)
	case reflect.Slice:
		return v, r.spend(rv.Len() * (body + 2))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return nil, errors.New("range over a number is not allowed (range over .Vars, .Labels or fromjson of a list)")
	}
	return nil, fmt.Errorf("range over a %s is not allowed (range over .Vars, .Labels or fromjson of a list)", rv.Kind())
}

// shellQuoteTemplate quotes a value for a POSIX shell: {{ shq .Vars.x }}.
func shellQuoteTemplate(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// limitedBuffer fails a write past max bytes, and charges r for every
// byte.
type limitedBuffer struct {
	bytes.Buffer
	max int
	r   *renderer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, fmt.Errorf("renders to more than %d bytes", b.max)
	}
	b.r.bytes -= len(p)
	if b.r.bytes < 0 {
		return 0, errStepsSpent
	}
	if err := b.r.spendBytes(len(p), writtenPerStep); err != nil {
		return 0, err
	}
	return b.Buffer.Write(p)
}

// guardLoops returns the steps of one run of the template under n, each
// loop's body counted once, and ends every range's pipeline with
// loopFunc, given the steps of the loop's body. It refuses {{ template }}
// and a range over a number written out.
func guardLoops(n parse.Node) (int, error) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return 0, nil
		}
		steps := 0
		for _, c := range n.Nodes {
			s, err := guardLoops(c)
			if err != nil {
				return 0, err
			}
			steps += s
		}
		return steps, nil
	case *parse.ActionNode:
		steps, err := pipeSteps(n.Pipe)
		return 1 + steps, err
	case *parse.TemplateNode:
		return 0, errors.New("template: calling a template ({{ template }}) is not allowed: write the command out")
	case *parse.RangeNode:
		if c := n.Pipe.Cmds; len(c) == 1 && len(c[0].Args) == 1 {
			if _, num := c[0].Args[0].(*parse.NumberNode); num {
				return 0, errors.New("template: range over a number is not allowed (range over .Vars, .Labels or fromjson of a list)")
			}
		}
		body, err := guardLoops(n.List)
		if err != nil {
			return 0, err
		}
		els, err := guardLoops(n.ElseList)
		if err != nil {
			return 0, err
		}
		steps, err := pipeSteps(n.Pipe)
		n.Pipe.Cmds = append(n.Pipe.Cmds, loopCommand(n.Pos, body))
		return 1 + steps + els, err
	case *parse.IfNode:
		return branchSteps(n.Pipe, n.List, n.ElseList)
	case *parse.WithNode:
		return branchSteps(n.Pipe, n.List, n.ElseList)
	}
	return 1, nil // text, comments, break, continue
}

func branchSteps(pipe *parse.PipeNode, list, elseList *parse.ListNode) (int, error) {
	a, err := guardLoops(list)
	if err != nil {
		return 0, err
	}
	b, err := guardLoops(elseList)
	if err != nil {
		return 0, err
	}
	steps, err := pipeSteps(pipe)
	return 1 + steps + a + b, err
}

// maxTemplateName bounds a field or variable name in a template: an
// error naming a longer one would cost more than the steps charge.
const maxTemplateName = 256

// pipeSteps is a step per argument, callSteps per function called (in
// nested pipelines too), and one per comparedPerStep bytes of a literal or
// a field name (hashed to look it up). A name longer than maxTemplateName
// is refused.
func pipeSteps(p *parse.PipeNode) (int, error) {
	if p == nil {
		return 0, nil
	}
	n := 0
	for _, c := range p.Cmds {
		if len(c.Args) > 0 {
			if _, call := c.Args[0].(*parse.IdentifierNode); call {
				n += callSteps
			}
		}
		for _, a := range c.Args {
			for _, name := range names(a) {
				if len(name) > maxTemplateName {
					return 0, fmt.Errorf("template: a name of %d bytes (%.20s…): at most %d", len(name), name, maxTemplateName)
				}
			}
			if inner, ok := a.(*parse.PipeNode); ok {
				steps, err := pipeSteps(inner)
				if err != nil {
					return 0, err
				}
				n += nestedSteps + steps
				continue
			}
			n += 1 + len(a.String())/comparedPerStep
		}
	}
	return n, nil
}

// names are the field and variable names an argument uses.
func names(a parse.Node) []string {
	switch a := a.(type) {
	case *parse.FieldNode:
		return a.Ident
	case *parse.VariableNode:
		return a.Ident
	case *parse.ChainNode:
		return a.Field
	}
	return nil
}

// loopCommand is `| gantry_loop <body>` at the end of a range pipeline.
func loopCommand(pos parse.Pos, body int) *parse.CommandNode {
	return &parse.CommandNode{NodeType: parse.NodeCommand, Pos: pos, Args: []parse.Node{
		parse.NewIdentifier(loopFunc).SetPos(pos),
		&parse.NumberNode{NodeType: parse.NodeNumber, Pos: pos, IsInt: true, Int64: int64(body), Text: strconv.Itoa(body)},
	}}
}

// maxContext bounds the action an execution error quotes.
const maxContext = 64

// cleanExecErr drops text/template's position prefix (": executing \"\" at
// <.Vars.x>: ") down to what went wrong and where.
func cleanExecErr(s string) string {
	s = strings.TrimPrefix(s, "template: ")
	if i := strings.Index(s, "executing \"\" at "); i >= 0 {
		s = s[i+len("executing \"\" at "):]
	}
	if j := strings.Index(s, ">: "); strings.HasPrefix(s, "<") && j > maxContext {
		s = strings.ToValidUTF8(s[:maxContext], "") + "…" + s[j:] // the action, cut: the reason follows it
	}
	if i := strings.Index(s, "<"+loopFunc+" "); i >= 0 {
		if j := strings.Index(s[i:], ">: "); j >= 0 {
			s = s[:i] + s[i+j+3:]
		}
	}
	s = strings.Replace(s, " | "+printFunc+">: ", ">: ", 1)
	s = strings.Replace(s, "error calling "+printFunc+": ", "", 1)
	return strings.Replace(s, "error calling "+loopFunc+": ", "", 1)
}
