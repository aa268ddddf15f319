// Package template renders gantry's command templates: Go text/template
// over the host a command runs on (Data), with gantry's functions (shq,
// fromjson, output) and text/template's own, each of them checked for
// the reads of outputs a command may not see.
//
// Who renders. The planner renders a composition an operator submits or
// asks to validate, and the CLI renders one on the user's side (gantry
// validate, plan, drift). No service renders for a viewer: a drift read
// sends the nodes and spec hashes its composition wants, rendered by the
// requester. What a composition's templates may cost is therefore
// bounded against an operator's mistake (a loop in a loop over large
// vars, a command that prints a var many times), not against someone who
// may submit anyway: every template renders at most MaxRendered bytes,
// and so does every function call in it; all of a composition's
// templates render at most MaxRenderedTotal bytes and run at most
// MaxTemplateSteps steps; a loop goes over a map or a list, never a
// number; and templates may not define or call templates.
package template

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	gotemplate "text/template"
	"text/template/parse"
	"time"
)

// MaxRendered bounds what one template renders to, and what one function
// call in a template returns.
const MaxRendered = 256 << 10

// MaxRenderedTotal bounds what all of one composition's templates render
// to together.
const MaxRenderedTotal = 128 << 20

// MaxTemplateSteps bounds the work of rendering all of one composition's
// templates. A step is a node of a template run once (an action, a piece
// of text, a condition), and each item a loop goes over costs its body's
// steps and 2 more (and a map's keys their sorting). 30,000,000 steps take a few seconds of CPU at most; a
// fleet of 5,000 hosts, 5 nodes each, each node writing an env file from
// 30 vars in a loop, takes about 5,000,000.
const MaxTemplateSteps = 30_000_000

// ErrBudget: a composition's templates take more than MaxTemplateSteps
// steps or render more than MaxRenderedTotal bytes.
var ErrBudget = fmt.Errorf("template: rendering this composition's templates takes more than %d steps or %d MiB (a loop over large vars, or long templates on many hosts): make them simpler", MaxTemplateSteps, MaxRenderedTotal>>20)

// loopFunc is the function the renderer puts at the end of every range
// pipeline: it checks what the range goes over and counts its steps.
const loopFunc = "gantry_loop"

// Outputs is how a template reads the output of an earlier node: the read
// renders as a marker that the executor replaces with the value when the
// node runs, so no function may see a marker but printing and shq.
type Outputs interface {
	// Read is the marker of {{ output target name [host] }}.
	Read(target, name string, host ...string) (string, error)
	// Has says whether s holds a marker (or what starts one).
	Has(s string) bool
	// Quoted is s, which shq quoted, its markers marked quoted once more.
	Quoted(s string) (string, error)
	// Check refuses a rendered text with a marker that is not whole.
	Check(s string) error
}

// Renderer renders one composition's templates, each text parsed once,
// all of them within MaxTemplateSteps and MaxRenderedTotal.
type Renderer struct {
	parsed   map[string]*parsed
	typed    map[string]*parsed // parsed for hosts with typed vars
	decoded  map[string]any     // typed vars' values by their text
	steps    int                // steps left
	bytes    int                // bytes left to render
	outputs  Outputs
	limit    time.Duration // MaxRenderTime
	deadline time.Time     // set by the first Render
}

type parsed struct {
	t     *gotemplate.Template
	nodes int // steps of one run, loop bodies once
	err   error
}

// New is a renderer of one composition's templates, whose output reads
// render through outputs (nil: none may be read).
func New(outputs Outputs) *Renderer {
	return &Renderer{parsed: map[string]*parsed{}, typed: map[string]*parsed{}, decoded: map[string]any{},
		steps: MaxTemplateSteps, bytes: MaxRenderedTotal, outputs: outputs, limit: MaxRenderTime}
}

func (r *Renderer) spend(n int) error {
	r.steps -= n
	if r.steps < 0 {
		return ErrBudget
	}
	return nil
}

// Render executes s as a template over d; text without "{{" is returned
// as is. A missing variable is an error, not "<no value>"; so is a
// template that takes the rest of the budget (ErrBudget).
func (r *Renderer) Render(s string, d Data) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, r.checkMarkers(s)
	}
	if err := r.inTime(); err != nil {
		return "", err
	}
	pt := r.parse(s, d.typed)
	if pt.err != nil {
		return "", pt.err
	}
	if err := r.spend(1 + pt.nodes); err != nil {
		return "", err
	}
	b := &limitedBuffer{r: r}
	if err := pt.t.Execute(b, d); err != nil {
		for _, sentinel := range []error{ErrBudget, ErrTooSlow} {
			if errors.Is(err, sentinel) {
				return "", sentinel
			}
		}
		return "", fmt.Errorf("template: %s", cleanExecErr(err.Error()))
	}
	if err := r.checkMarkers(b.String()); err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	return b.String(), nil
}

func (r *Renderer) checkMarkers(s string) error {
	if r.outputs == nil {
		return nil
	}
	return r.outputs.Check(s)
}

// parse parses s once, and once more for hosts with typed vars (typed),
// whose actions print a typed list or mapping as its JSON.
func (r *Renderer) parse(s string, typed bool) *parsed {
	cache := r.parsed
	if typed {
		cache = r.typed
	}
	if pt, ok := cache[s]; ok {
		return pt
	}
	pt := &parsed{}
	cache[s] = pt
	t, err := gotemplate.New("").Funcs(r.funcs()).Option("missingkey=error").Parse(s)
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

// ParseTree parses s as a command template, with gantry's functions, for
// reading what it calls (the output reads validation checks). It renders
// nothing.
func ParseTree(s string) (*parse.Tree, error) {
	t, err := gotemplate.New("").Funcs(parseFuncs).Parse(s)
	if err != nil {
		return nil, err
	}
	return t.Tree, nil
}

// parseFuncs are the functions a template may call, for ParseTree.
var parseFuncs = New(nil).funcs()

// loop lets a range go over a list, each item costing the steps of the
// loop's body and 2 more, or a map, each key costing as much and the
// sorting of the keys that text/template does each time (about log2(keys)
// comparisons a key). Anything else, a number above all (text/template
// would count up to it), is refused.
func (r *Renderer) loop(body int, v any) (any, error) {
	if err := r.inTime(); err != nil {
		return nil, err
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Invalid:
		return v, nil // nothing to go over
	case reflect.Map:
		return v, r.spend(rv.Len() * (body + 2 + bits.Len(uint(rv.Len()))))
	case reflect.Slice:
		return v, r.spend(rv.Len() * (body + 2))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return nil, errors.New("range over a number is not allowed (range over .Vars, .Labels or fromjson of a list)")
	}
	return nil, fmt.Errorf("range over a %s is not allowed (range over .Vars, .Labels or fromjson of a list)", rv.Kind())
}

// limitedBuffer fails a write past MaxRendered bytes, or past what the
// composition has left to render.
type limitedBuffer struct {
	bytes.Buffer
	r *Renderer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > MaxRendered {
		return 0, fmt.Errorf("renders to more than %d bytes", MaxRendered)
	}
	if b.r.bytes -= len(p); b.r.bytes < 0 {
		return 0, ErrBudget
	}
	if err := b.r.inTime(); err != nil {
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
		n.Pipe.Cmds = append(n.Pipe.Cmds, loopCommand(n.Pos, body))
		return 1 + els, err
	case *parse.IfNode:
		return branchSteps(n.List, n.ElseList)
	case *parse.WithNode:
		return branchSteps(n.List, n.ElseList)
	}
	return 1, nil // an action, text, a comment, break, continue
}

func branchSteps(list, elseList *parse.ListNode) (int, error) {
	a, err := guardLoops(list)
	if err != nil {
		return 0, err
	}
	b, err := guardLoops(elseList)
	return 1 + a + b, err
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
	s = strings.Replace(s, "error calling "+loopFunc+": ", "", 1)
	return missingVar(s)
}

// missingVar words text/template's `<.Vars.x>: map has no entry for key
// "x"` as what it means: a var that is set nowhere (any other mapping's
// missing key is said as a key).
func missingVar(s string) string {
	action, key, ok := strings.Cut(s, ">: map has no entry for key ")
	if !ok {
		return s
	}
	name := strings.Trim(key, `"`)
	if action == "<.Vars."+name || action == "<$.Vars."+name {
		return action + ">: var " + key + " is not set (in vars:, a host's or group's vars, an inventory, --var or --var-file)"
	}
	return action + ">: no key " + key + " in that mapping"
}
