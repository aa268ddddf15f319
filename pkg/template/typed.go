package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/template/parse"
)

// A host's typed vars (an inventory's lists, mappings, numbers and
// booleans, which travel as their JSON text) reach templates decoded: a
// list as a List, a mapping as an Object, a whole number as an int64,
// another number as its text (json.Number), a boolean as a bool. Printed
// whole ({{ .Vars.ntp }}), a list or mapping gives its JSON text, as the
// text var did.

// printFunc is the function the renderer puts at the end of every action
// that prints, in the templates of hosts with typed vars: a typed list or
// mapping prints as its JSON text. (The hosts without do without the
// call.)
const printFunc = "gantry_print"

// printTyped ends the pipeline of every action under n that prints with
// printFunc.
func printTyped(n parse.Node) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			printTyped(c)
		}
	case *parse.ActionNode:
		if len(n.Pipe.Decl) == 0 && !printsText(n.Pipe) {
			n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos,
				Args: []parse.Node{parse.NewIdentifier(printFunc).SetPos(n.Pos)}})
		}
	case *parse.RangeNode:
		printTyped(n.List)
		printTyped(n.ElseList)
	case *parse.IfNode:
		printTyped(n.List)
		printTyped(n.ElseList)
	case *parse.WithNode:
		printTyped(n.List)
		printTyped(n.ElseList)
	}
}

// printsText says whether a pipeline ends in a call of a function that
// returns text or a boolean (shq, printf, eq...), which needs no
// printFunc.
func printsText(p *parse.PipeNode) bool {
	last := p.Cmds[len(p.Cmds)-1]
	if id, call := last.Args[0].(*parse.IdentifierNode); call {
		switch id.Ident {
		case "shq", "output", "printf", "print", "println", "html", "js", "urlquery", "eq", "ne", "lt", "le", "gt", "ge", "len", "not":
			return true
		}
	}
	return false
}

// decodeTyped decodes a typed var's JSON text.
func decodeTyped(s string) (any, error) {
	v, err := decodeJSON(s)
	if err != nil {
		return nil, err
	}
	return typedOf(v), nil
}

// decodeJSON decodes one JSON value, numbers as written.
func decodeJSON(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// typedOf is a decoded JSON value as templates see it.
func typedOf(v any) any {
	switch v := v.(type) {
	case []any:
		for i := range v {
			v[i] = typedOf(v[i])
		}
		return List(v)
	case map[string]any:
		for k := range v {
			v[k] = typedOf(v[k])
		}
		return Object(v)
	case json.Number:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && strconv.FormatInt(n, 10) == string(v) {
			return n // prints as written
		}
	}
	return v
}

// jsonOf is a typed list or mapping as compact JSON text (keys sorted).
func jsonOf(what string, v any) (string, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return capped(what, strings.TrimSuffix(b.String(), "\n"))
}

// printed is v as an action prints it: a typed list or mapping as its
// JSON text, anything else as it is.
// printed is printFunc: what an action prints, checked for the time.
func (r *Renderer) printed(v any) (any, error) {
	if err := r.inTime(); err != nil {
		return nil, err
	}
	return printed(v)
}

func printed(v any) (any, error) {
	switch v.(type) {
	case List, Object:
		return jsonOf("printing a typed var", v)
	}
	return v, nil
}

// plain is args with every typed list or mapping as its JSON text, for
// print, printf and println.
func plain(args []any) ([]any, error) {
	for i, a := range args {
		p, err := printed(a)
		if err != nil {
			return nil, err
		}
		args[i] = p
	}
	return args, nil
}

// textOf is a value as shq quotes it: text as it is, a typed value as
// its text.
func textOf(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return string(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case bool:
		return strconv.FormatBool(v), nil
	case List, Object:
		return jsonOf("shq", v)
	case nil:
		return "", errors.New("shq of no value")
	}
	return "", fmt.Errorf("shq of a %T: give it a var's value", v)
}
