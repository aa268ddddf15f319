package dag

import (
	"bytes"
	"errors"
	"fmt"
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
// most MaxRendered bytes; all of a composition's templates together run at
// most MaxTemplateSteps steps; a template loops only over the
// composition's own data (a map or a list), never over a number; and
// templates may not define or call other templates, which would let a
// few lines call each other 2^40 times.

// MaxRendered bounds what one command template may render to.
const MaxRendered = 256 << 10

// MaxTemplateSteps bounds the work of rendering all of one composition's
// templates. A step is a node of a template run once (an action, a piece
// of text), a node of a loop's body run once more, or 64 bytes that a
// function returns; going over a map costs a step more per key (its keys
// are sorted first). A fleet of 10,000 hosts, 10 nodes each, with a few
// actions per command takes about a million; 5 million take a second or
// two on a slow machine.
const MaxTemplateSteps = 5_000_000

// errStepsSpent: the composition's templates took more than
// MaxTemplateSteps steps.
var errStepsSpent = fmt.Errorf("template: rendering this composition's templates takes more than %d steps (a loop over large vars, or long templates on many hosts): make them simpler", MaxTemplateSteps)

// loopFunc is the function the renderer puts at the end of every range
// pipeline: it checks what the range goes over and charges its steps.
const loopFunc = "gantry_loop"

// renderer renders one composition's templates, each text parsed once,
// all of them within MaxTemplateSteps.
type renderer struct {
	parsed   map[string]*parsedTemplate
	steps    int  // steps left
	reported bool // errStepsSpent was reported
}

type parsedTemplate struct {
	t     *template.Template
	nodes int // steps of one run, loop bodies once
	err   error
}

func newRenderer() *renderer {
	return &renderer{parsed: map[string]*parsedTemplate{}, steps: MaxTemplateSteps}
}

func (r *renderer) spend(n int) error {
	r.steps -= n
	if r.steps < 0 {
		return errStepsSpent
	}
	return nil
}

// render executes s as a template; text without "{{" is returned as is.
// A missing variable is an error, not "<no value>".
func (r *renderer) render(s string, data TemplateData) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	pt := r.parse(s)
	if pt.err != nil {
		return "", pt.err
	}
	if err := r.spend(pt.nodes); err != nil {
		return "", err
	}
	b := &limitedBuffer{max: MaxRendered}
	if err := pt.t.Execute(b, data); err != nil {
		if errors.Is(err, errStepsSpent) {
			return "", errStepsSpent
		}
		return "", fmt.Errorf("template: %s", cleanExecErr(err.Error()))
	}
	return b.String(), nil
}

func (r *renderer) parse(s string) *parsedTemplate {
	if pt, ok := r.parsed[s]; ok {
		return pt
	}
	pt := &parsedTemplate{}
	r.parsed[s] = pt
	t, err := template.New("").Funcs(r.funcs()).Option("missingkey=error").Parse(s)
	switch {
	case err != nil:
		pt.err = fmt.Errorf("template: %s", strings.TrimPrefix(err.Error(), "template: :"))
	case len(t.Templates()) != 1 || t.Tree == nil:
		pt.err = errors.New("template: define and block are not allowed: write the command out")
	default:
		pt.t = t
		pt.nodes, pt.err = guardLoops(t.Tree.Root)
	}
	return pt
}

// funcs are the functions templates may call: shq, and text/template's
// own, those that make text charged for what they make.
func (r *renderer) funcs() template.FuncMap {
	made := func(s string) (string, error) { return s, r.spend(len(s)/64 + 1) }
	return template.FuncMap{
		loopFunc:   r.loop,
		"shq":      func(s string) (string, error) { return made(shellQuoteTemplate(s)) },
		"printf":   func(f string, a ...any) (string, error) { return made(fmt.Sprintf(f, a...)) },
		"print":    func(a ...any) (string, error) { return made(fmt.Sprint(a...)) },
		"println":  func(a ...any) (string, error) { return made(fmt.Sprintln(a...)) },
		"html":     func(a ...any) (string, error) { return made(template.HTMLEscaper(a...)) },
		"js":       func(a ...any) (string, error) { return made(template.JSEscaper(a...)) },
		"urlquery": func(a ...any) (string, error) { return made(template.URLQueryEscaper(a...)) },
	}
}

// loop lets a range go over a map or a list (of the composition's data),
// charging each element's run of the body; anything else, a number above
// all (text/template would count up to it), is refused.
func (r *renderer) loop(body int, v any) (any, error) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Invalid:
		return v, nil // nothing to go over
	case reflect.Map:
		return v, r.spend(rv.Len() * (body + 2))
	case reflect.Slice, reflect.Array:
		return v, r.spend(rv.Len() * (body + 1))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return nil, errors.New("range over a number is not allowed (range over .Vars or .Labels)")
	}
	return nil, fmt.Errorf("range over a %s is not allowed (range over .Vars or .Labels)", rv.Kind())
}

// shellQuoteTemplate quotes a value for a POSIX shell: {{ shq .Vars.x }}.
func shellQuoteTemplate(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// limitedBuffer fails a write past max bytes.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, fmt.Errorf("renders to more than %d bytes", b.max)
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
		return 1 + pipeSteps(n.Pipe), nil
	case *parse.TemplateNode:
		return 0, errors.New("template: calling a template ({{ template }}) is not allowed: write the command out")
	case *parse.RangeNode:
		for _, c := range n.Pipe.Cmds {
			for _, a := range c.Args {
				if _, num := a.(*parse.NumberNode); num {
					return 0, errors.New("template: range over a number is not allowed (range over .Vars or .Labels)")
				}
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
		n.Pipe.Cmds = append(n.Pipe.Cmds, loopCommand(n.Pos, body))
		return 1 + pipeSteps(n.Pipe) + els, nil
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
	return 1 + pipeSteps(pipe) + a + b, nil
}

func pipeSteps(p *parse.PipeNode) int {
	if p == nil {
		return 0
	}
	n := 0
	for _, c := range p.Cmds {
		n += len(c.Args)
	}
	return n
}

// loopCommand is `| gantry_loop <body>` at the end of a range pipeline.
func loopCommand(pos parse.Pos, body int) *parse.CommandNode {
	return &parse.CommandNode{NodeType: parse.NodeCommand, Pos: pos, Args: []parse.Node{
		parse.NewIdentifier(loopFunc).SetPos(pos),
		&parse.NumberNode{NodeType: parse.NodeNumber, Pos: pos, IsInt: true, Int64: int64(body), Text: strconv.Itoa(body)},
	}}
}

// cleanExecErr drops text/template's position prefix (": executing \"\" at
// <.Vars.x>: ") down to what went wrong and where.
func cleanExecErr(s string) string {
	s = strings.TrimPrefix(s, "template: ")
	if i := strings.Index(s, "executing \"\" at "); i >= 0 {
		s = s[i+len("executing \"\" at "):]
	}
	return strings.Replace(s, "error calling "+loopFunc+": ", "", 1)
}
