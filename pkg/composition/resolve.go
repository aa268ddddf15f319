package composition

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// A composition's `inventory: FILE` stands in for its hosts and groups. The
// gantry CLI reads the file (relative to the composition's directory) and
// puts what it holds in their place before anything else sees the
// composition: the services never read the submitter's files, and reject a
// composition that still names one.

// Resolve parses a composition document and inlines the inventory it names:
// the `inventory` key is replaced by `hosts` and `groups` read from that
// file, a relative path being taken from dir. had says whether the
// document named an inventory. root is nil only when the document does not
// parse; err holds every problem with the inventory (those in the
// inventory file carry its name as their File), and root is then the
// document without its `inventory` key.
func Resolve(name string, data []byte, dir string) (root *dag.Value, had bool, err error) {
	return resolve(name, data, dir, nil)
}

// resolve is Resolve, passing the inventory's warnings to warn (when not
// nil): a secret's value written in it, which the hosts' vars leave out.
func resolve(name string, data []byte, dir string, warn func(dag.Problem)) (root *dag.Value, had bool, err error) {
	root, err = Parse(name, data)
	if err != nil {
		return nil, false, err
	}
	if root.Kind != dag.KindMap {
		return root, false, nil
	}
	at := slices.Index(root.Keys, "inventory")
	if at < 0 || root.Vals[at].Kind != dag.KindString {
		return root, false, nil // absent, null, or a type the decoder reports
	}
	iv := root.Vals[at]
	drop := func() {
		root.Keys = append(root.Keys[:at:at], root.Keys[at+1:]...)
		root.Vals = append(root.Vals[:at:at], root.Vals[at+1:]...)
	}
	for _, k := range []string{"hosts", "groups"} {
		if v := root.Get(k); v != nil && v.Kind != dag.KindNull {
			drop()
			return root, true, invalid(dag.Problem{Path: "inventory", Line: iv.Line, Code: dag.CodeValue,
				Message: "inventory stands in for hosts and groups; give one or the other"})
		}
	}
	file := iv.Scalar
	if strings.TrimSpace(file) == "" {
		drop()
		return root, true, invalid(dag.Problem{Path: "inventory", Line: iv.Line, Code: dag.CodeRequired,
			Message: "inventory needs a file name (an Ansible inventory, relative to this file)"})
	}
	if !filepath.IsAbs(file) {
		file = filepath.Join(dir, file)
	}
	inv, err := ReadInventoryFile(file)
	if err != nil {
		drop()
		var bad *dag.InvalidError
		if errors.As(err, &bad) {
			return root, true, bad
		}
		return root, true, invalid(dag.Problem{Path: "inventory", Line: iv.Line, Code: dag.CodeValue, Message: err.Error()})
	}
	if warn != nil {
		for _, w := range inv.Warnings {
			warn(w)
		}
	}
	hosts, err := treeOf(inv.Hosts, iv.Line)
	if err != nil {
		return nil, true, err
	}
	keys, vals := []string{"hosts"}, []*dag.Value{hosts}
	if len(inv.Groups) > 0 {
		groups, err := treeOf(inv.Groups, iv.Line)
		if err != nil {
			return nil, true, err
		}
		keys, vals = append(keys, "groups"), append(vals, groups)
	}
	root.Keys = append(root.Keys[:at:at], append(keys, root.Keys[at+1:]...)...)
	root.Vals = append(root.Vals[:at:at], append(vals, root.Vals[at+1:]...)...)
	return root, true, nil
}

// treeOf is v as a document tree, every value on line: problems the
// composition finds with the hosts and groups point at its inventory line.
func treeOf(v any, line int) (*dag.Value, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	t, err := dag.ParseJSON(b)
	if err != nil {
		return nil, err
	}
	var set func(*dag.Value)
	set = func(v *dag.Value) {
		v.Line = line
		for _, it := range v.Items {
			set(it)
		}
		for _, it := range v.Vals {
			set(it)
		}
	}
	set(t)
	return t, nil
}

// LoadIn is Load for a document read from a file in dir: the inventory it
// names is read from there and inlined first.
func LoadIn(name string, data []byte, dir string) (*dag.Composition, error) {
	return loadIn(name, data, dir, nil)
}

func loadIn(name string, data []byte, dir string, warn func(dag.Problem)) (*dag.Composition, error) {
	root, _, err := resolve(name, data, dir, warn)
	if root == nil {
		return nil, err
	}
	return loadResolved(root, err)
}

// loadResolved loads a resolved tree, reporting the problems Resolve found
// with those of the composition. When the inventory could not be read, the
// composition has no hosts: only what decoding finds is reported, not
// every server missing from hosts.
func loadResolved(root *dag.Value, resolveErr error) (*dag.Composition, error) {
	if resolveErr == nil {
		return dag.Load(root)
	}
	var bad *dag.InvalidError
	if !errors.As(resolveErr, &bad) {
		return nil, resolveErr
	}
	var err error
	if root.Get("hosts") != nil {
		_, err = dag.Load(root)
	} else {
		_, err = dag.Decode(root)
	}
	var ps []dag.Problem
	var own *dag.InvalidError
	if errors.As(err, &own) {
		ps = append(ps, own.Problems...)
	}
	ps = append(ps, bad.Problems...)
	return nil, invalid(ps...)
}

// fileDir is the directory a composition file's inventory is read from:
// the file's own, or the working directory for standard input.
func fileDir(path string) string {
	if path == "-" {
		return "."
	}
	return filepath.Dir(path)
}

// ReadForSubmit reads a composition file as it is to be sent to the
// services: the file's bytes as they are, or, when it names an inventory,
// the composition with its inventory inlined, as JSON, once it loads
// without a problem (inlined is then true; err holds every problem when it
// does not). A document over the size limit comes back as read, for the
// caller to refuse.
func ReadForSubmit(path string) (data []byte, inlined bool, err error) {
	return ReadForSubmitWarn(path, nil)
}

// ReadForSubmitWarn is ReadForSubmit, passing the warnings of the
// inventory the composition names to warn.
func ReadForSubmitWarn(path string, warn func(dag.Problem)) (data []byte, inlined bool, err error) {
	data, err = ReadFile(path)
	if err != nil || len(data) > dag.DefaultMaxBytes {
		return data, false, err
	}
	root, had, rerr := resolve(path, data, fileDir(path), warn)
	if !had {
		return data, false, nil // the services report whatever is wrong, as always
	}
	if root == nil {
		return nil, true, rerr
	}
	if _, err := loadResolved(root, rerr); err != nil {
		return nil, true, err
	}
	return EncodeJSON(root), true, nil
}

// EncodeJSON writes a document tree as JSON, keys in their order.
func EncodeJSON(v *dag.Value) []byte {
	var b bytes.Buffer
	encodeValue(&b, v)
	return b.Bytes()
}

func encodeValue(b *bytes.Buffer, v *dag.Value) {
	switch v.Kind {
	case dag.KindNull:
		b.WriteString("null")
	case dag.KindBool:
		b.WriteString(v.Scalar)
	case dag.KindNumber:
		if json.Valid([]byte(v.Scalar)) {
			b.WriteString(v.Scalar)
		} else { // .inf, .nan: not JSON numbers
			quote(b, v.Scalar)
		}
	case dag.KindString:
		quote(b, v.Scalar)
	case dag.KindList:
		b.WriteByte('[')
		for i, it := range v.Items {
			if i > 0 {
				b.WriteByte(',')
			}
			encodeValue(b, it)
		}
		b.WriteByte(']')
	case dag.KindMap:
		b.WriteByte('{')
		for i, k := range v.Keys {
			if i > 0 {
				b.WriteByte(',')
			}
			quote(b, k)
			b.WriteByte(':')
			encodeValue(b, v.Vals[i])
		}
		b.WriteByte('}')
	}
}

// quote writes s as a JSON string, leaving <, > and & as they are.
func quote(b *bytes.Buffer, s string) {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)
	b.Truncate(b.Len() - 1) // Encode ends with a newline
}
