// Package composition reads composition documents in YAML or JSON into the
// format-neutral tree that pkg/dag decodes, so both formats share one set of
// field names, checks and error messages. It holds the YAML dependency so
// that pkg/dag can stay on the standard library.
package composition

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
	yaml "go.yaml.in/yaml/v3"
)

// Format is a document format.
type Format string

const (
	FormatYAML Format = "yaml"
	FormatJSON Format = "json"
)

// DetectFormat picks the format from a file name's extension, else from the
// first non-blank byte ('{' means JSON).
func DetectFormat(name string, data []byte) Format {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return FormatJSON
	case ".yaml", ".yml":
		return FormatYAML
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return FormatJSON
	}
	return FormatYAML
}

// Parse reads a document of either format into a tree.
func Parse(name string, data []byte) (*dag.Value, error) {
	if DetectFormat(name, data) == FormatJSON {
		return dag.ParseJSON(data)
	}
	return ParseYAML(data)
}

// Load parses, decodes, validates and normalizes a composition. Every
// problem comes back at once as a *dag.InvalidError.
func Load(name string, data []byte) (*dag.Composition, error) {
	root, err := Parse(name, data)
	if err != nil {
		return nil, err
	}
	return dag.Load(root)
}

// LoadFile reads a composition from a file ("-" is standard input), with
// the inventory it names inlined (see Resolve).
func LoadFile(path string) (*dag.Composition, error) {
	return LoadFileWarn(path, nil)
}

// LoadFileWarn is LoadFile, passing the warnings of the inventory the
// composition names to warn (when not nil).
func LoadFileWarn(path string, warn func(dag.Problem)) (*dag.Composition, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return loadIn(path, data, fileDir(path), warn)
}

// ReadFile reads at most one byte over the size limit, so an enormous file
// is rejected without being read whole.
func ReadFile(path string) ([]byte, error) {
	var r io.Reader
	if path == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read composition: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, dag.DefaultMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read composition %s: %w", path, err)
	}
	return data, nil
}

// ParseYAML parses one YAML document into a tree. Duplicate keys, more than
// one document, nesting deeper than dag.MaxDepth, non-scalar keys, unknown
// tags and alias expansion past a budget are rejected; merge keys (<<) work.
func ParseYAML(data []byte) (v *dag.Value, err error) {
	if err := dag.CheckSize(data, 0); err != nil {
		return nil, err
	}
	defer func() { // the YAML library must never take a service down
		if r := recover(); r != nil {
			v, err = nil, invalid(dag.Problem{Code: dag.CodeSyntax, Message: fmt.Sprintf("invalid YAML: parser failed: %v", r)})
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, invalid(dag.Problem{Code: dag.CodeRequired, Message: "the document is empty"})
		}
		return nil, yamlErr(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlErr(err)
		}
		return nil, invalid(dag.Problem{Line: extra.Line, Code: dag.CodeSyntax, Message: "more than one YAML document: a file holds one composition"})
	}
	c := converter{budget: 50*countNodes(&doc, 0) + 10000}
	out := c.value(&doc, "", 0)
	if len(c.problems) > 0 {
		return nil, invalid(c.problems...)
	}
	return out, nil
}

// parseYAMLDoc decodes one YAML document into a node, refusing a second
// one; an empty document is a nil node.
func parseYAMLDoc(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, yamlErr(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlErr(err)
		}
		return nil, invalid(dag.Problem{Line: extra.Line, Code: dag.CodeSyntax, Message: "more than one YAML document: a file holds one"})
	}
	return &doc, nil
}

func invalid(ps ...dag.Problem) error { return &dag.InvalidError{Problems: ps} }

var lineRE = regexp.MustCompile(`line (\d+)`)

func yamlErr(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = strings.TrimSpace(strings.Replace(msg, m[0]+":", "", 1))
	}
	return invalid(dag.Problem{Line: line, Code: dag.CodeSyntax, Message: "invalid YAML: " + msg})
}

// countNodes counts the nodes as written (aliases not expanded).
func countNodes(n *yaml.Node, depth int) int {
	if n == nil || depth > 10*dag.MaxDepth {
		return 0
	}
	c := 1
	for _, k := range n.Content {
		c += countNodes(k, depth+1)
	}
	return c
}

type converter struct {
	problems []dag.Problem
	budget   int // values still allowed, so aliases cannot expand without bound
	stopped  bool
	// yaml11 reads as Ansible does (inventory_yaml11.go): plain scalars
	// typed by YAML 1.1 rules, !vault and !unsafe tags, a key given twice
	// a warning, the last one kept.
	yaml11   bool
	vault    map[*dag.Value]bool // values tagged !vault
	warnings []dag.Problem
}

func (c *converter) fail(n *yaml.Node, path string, code dag.Code, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	c.problems = append(c.problems, dag.Problem{Path: path, Line: line, Code: code, Message: fmt.Sprintf(format, args...)})
}

func (c *converter) value(n *yaml.Node, path string, depth int) *dag.Value {
	if c.stopped {
		return nil
	}
	if depth > dag.MaxDepth {
		c.fail(n, path, dag.CodeTooDeep, "nesting deeper than %d levels", dag.MaxDepth)
		c.stopped = true
		return nil
	}
	c.budget--
	if c.budget < 0 {
		c.fail(n, path, dag.CodeAliasBomb, "YAML aliases expand too far (an alias expansion bomb?)")
		c.stopped = true
		return nil
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			c.fail(n, path, dag.CodeRequired, "the document is empty")
			return nil
		}
		return c.value(n.Content[0], path, depth)
	case yaml.AliasNode:
		if n.Alias == nil {
			c.fail(n, path, dag.CodeSyntax, "alias to an unknown anchor")
			return nil
		}
		return c.value(n.Alias, path, depth+1)
	case yaml.SequenceNode:
		v := &dag.Value{Kind: dag.KindList, Line: n.Line, Items: make([]*dag.Value, 0, len(n.Content))}
		for i, item := range n.Content {
			if x := c.value(item, dag.IndexPath(path, i), depth+1); x != nil {
				v.Items = append(v.Items, x)
			}
		}
		return v
	case yaml.MappingNode:
		return c.mapping(n, path, depth)
	case yaml.ScalarNode:
		if c.yaml11 {
			return c.scalar11(n, path)
		}
		return c.scalar(n, path)
	}
	c.fail(n, path, dag.CodeSyntax, "unsupported YAML node")
	return nil
}

func (c *converter) scalar(n *yaml.Node, path string) *dag.Value {
	v := &dag.Value{Line: n.Line, Scalar: n.Value}
	switch n.ShortTag() {
	case "!!null":
		v.Kind, v.Scalar = dag.KindNull, ""
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			c.fail(n, path, dag.CodeType, "a value tagged !!bool that is not true or false (the value is not shown: it may be a secret)")
			return nil
		}
		v.Kind, v.Scalar = dag.KindBool, strconv.FormatBool(b)
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			c.fail(n, path, dag.CodeType, "a value tagged !!int that is not a whole number within 64 bits (the value is not shown: it may be a secret)")
			return nil
		}
		v.Kind, v.Scalar = dag.KindNumber, strconv.FormatInt(i, 10)
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			c.fail(n, path, dag.CodeType, "a value tagged !!float that is not a number (the value is not shown: it may be a secret)")
			return nil
		}
		v.Kind, v.Scalar = dag.KindNumber, strconv.FormatFloat(f, 'g', -1, 64)
	case "!!str", "!!timestamp", "!!binary":
		v.Kind = dag.KindString
	default:
		c.fail(n, path, dag.CodeType, "unsupported YAML tag %q", n.Tag)
		return nil
	}
	return v
}

func (c *converter) mapping(n *yaml.Node, path string, depth int) *dag.Value {
	v := &dag.Value{Kind: dag.KindMap, Line: n.Line}
	firstLine := make(map[string]int)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if kn.Kind == yaml.AliasNode && kn.Alias != nil {
			kn = kn.Alias
		}
		if kn.Kind != yaml.ScalarNode {
			c.fail(kn, path, dag.CodeType, "mapping keys must be plain names, not a %s", kindName(kn.Kind))
			continue
		}
		if kn.ShortTag() == "!!merge" {
			merges = append(merges, vn)
			continue
		}
		kpath := dag.KeyPath(path, kn.Value)
		if first, dup := firstLine[kn.Value]; dup {
			if c.yaml11 {
				c.replace(v, kn, vn, kpath, first, depth)
				continue
			}
			c.fail(kn, kpath, dag.CodeDuplicateKey, "key %q given twice (first on line %d)", kn.Value, first)
			continue
		}
		firstLine[kn.Value] = kn.Line
		if x := c.value(vn, kpath, depth+1); x != nil {
			v.Keys = append(v.Keys, kn.Value)
			v.Vals = append(v.Vals, x)
		}
	}
	// Merge keys: explicit keys win, then earlier merges over later ones.
	for _, m := range merges {
		srcs := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			srcs = m.Content
		}
		for _, src := range srcs {
			mv := c.value(src, path, depth+1)
			if mv == nil {
				continue
			}
			if mv.Kind != dag.KindMap {
				c.fail(src, path, dag.CodeType, "a merge (<<) needs a mapping, got a %s", mv.Kind)
				continue
			}
			for i, k := range mv.Keys {
				if _, present := firstLine[k]; present {
					continue
				}
				firstLine[k] = mv.Vals[i].Line
				v.Keys = append(v.Keys, k)
				v.Vals = append(v.Vals, mv.Vals[i])
			}
		}
	}
	return v
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	}
	return "complex value"
}
