package dag_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The JSON Schemas of docs/ against the decoders: docs/composition.schema.json
// must name every field the composition decoder accepts (and no other),
// accept every example, and reject every structurally invalid composition of
// validationCases; docs/inventory.schema.json the same for the
// `ansible-inventory --list` JSON that pkg/composition reads.

const (
	compositionSchema = "../../docs/composition.schema.json"
	inventorySchema   = "../../docs/inventory.schema.json"
)

func compileSchema(t *testing.T, path string) *jsonschema.Schema {
	t.Helper()
	s, err := jsonschema.NewCompiler().Compile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

// schemaValidate validates a JSON document; a document that is not JSON
// is an error too.
func schemaValidate(s *jsonschema.Schema, doc []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(v)
}

// step is one step of a path in a document: a field name, "[]" (an item
// of a list) or "{}" (a value of a mapping).
type step = string

func pathText(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		switch s {
		case "[]", "{}":
			b.WriteString(s)
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		}
	}
	if b.Len() == 0 {
		return "(the top level)"
	}
	return b.String()
}

// decoderAccepts says whether the composition decoder knows field in the
// object at steps: it decodes a document holding only `field: null` there
// (null is the same as leaving a field out) and looks for an unknown field
// problem at its path.
func decoderAccepts(t *testing.T, steps []step, field string) bool {
	t.Helper()
	var inner any = map[string]any{field: nil}
	for i := len(steps) - 1; i >= 0; i-- {
		switch steps[i] {
		case "[]":
			inner = []any{inner}
		case "{}":
			inner = map[string]any{"x": inner}
		default:
			inner = map[string]any{steps[i]: inner}
		}
	}
	path := ""
	for _, s := range steps {
		switch s {
		case "[]":
			path = dag.IndexPath(path, 0)
		case "{}":
			path = dag.KeyPath(path, "x")
		default:
			path = dag.KeyPath(path, s)
		}
	}
	path = dag.KeyPath(path, field)
	doc, err := json.Marshal(inner)
	if err != nil {
		t.Fatal(err)
	}
	root, err := dag.ParseJSON(doc)
	if err != nil {
		t.Fatalf("probe %s: %v", doc, err)
	}
	_, err = dag.Decode(root)
	if err == nil {
		return true
	}
	for _, p := range problemsOf(t, err) {
		if p.Code == dag.CodeUnknownField && p.Path == path {
			return false
		}
	}
	return true
}

// schemaNode is a JSON Schema object (decoded as maps), with its root to
// resolve "#/definitions/..." references.
type schemaNode struct {
	root, node map[string]any
}

func (s schemaNode) resolve(t *testing.T) schemaNode {
	t.Helper()
	for {
		ref, ok := s.node["$ref"].(string)
		if !ok {
			return s
		}
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		if !ok {
			t.Fatalf("schema: reference %q is not to #/definitions/", ref)
		}
		defs, _ := s.root["definitions"].(map[string]any)
		def, ok := defs[name].(map[string]any)
		if !ok {
			t.Fatalf("schema: no definition %q", name)
		}
		s.node = def
	}
}

// properties are the names the object schema lists, with their schemas.
func (s schemaNode) properties(t *testing.T) map[string]schemaNode {
	t.Helper()
	s = s.resolve(t)
	out := map[string]schemaNode{}
	props, _ := s.node["properties"].(map[string]any)
	for k, v := range props {
		out[k] = schemaNode{root: s.root, node: v.(map[string]any)}
	}
	// an object that is one of several shapes (depends_on: an id or
	// {formula, condition})
	for _, key := range []string{"anyOf", "oneOf"} {
		branches, _ := s.node[key].([]any)
		for _, b := range branches {
			for k, v := range (schemaNode{root: s.root, node: b.(map[string]any)}).properties(t) {
				out[k] = v
			}
		}
	}
	return out
}

// child is the schema of a list's items or a mapping's values.
func (s schemaNode) child(t *testing.T, kind step, at string) schemaNode {
	t.Helper()
	key := map[step]string{"[]": "items", "{}": "additionalProperties"}[kind]
	s = s.resolve(t)
	n, ok := s.node[key].(map[string]any)
	if !ok {
		t.Fatalf("schema: %s has no %s schema", at, key)
	}
	return schemaNode{root: s.root, node: n}
}

var jsonMarshaler = reflect.TypeFor[json.Marshaler]()

// compareFields walks the Go type of the object at steps (a dag type, by
// its json tags) and its schema: every field the decoder accepts must be a
// property of the schema, and every property a field the decoder accepts.
func compareFields(t *testing.T, report func(string, ...any), typ reflect.Type, steps []step, s schemaNode) {
	t.Helper()
	props := s.properties(t)
	at := pathText(steps)
	seen := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		seen[name] = true
		accepted := decoderAccepts(t, steps, name)
		prop, inSchema := props[name]
		switch {
		case accepted && !inSchema:
			report("%s has no property %q at %s: the decoder accepts it (%s.%s); add it to the schema", filepath.Base(compositionSchema), name, at, typ, f.Name)
			continue
		case !accepted && inSchema:
			report("%s has the property %q at %s, which the decoder refuses as an unknown field", filepath.Base(compositionSchema), name, at)
			continue
		case !accepted:
			continue // set by gantry itself (a fanned-out formula's instance), not written
		}
		walkValue(t, report, f.Type, append(slices.Clone(steps), name), prop)
	}
	for name := range props {
		if !seen[name] && !decoderAccepts(t, steps, name) {
			report("%s has the property %q at %s, which the decoder refuses as an unknown field", filepath.Base(compositionSchema), name, at)
		}
	}
}

// walkValue follows a field's type into the objects it holds: lists and
// mappings of structs, and structs. Types with their own JSON form
// (durations, amounts, env values) are values, not objects.
func walkValue(t *testing.T, report func(string, ...any), typ reflect.Type, steps []step, s schemaNode) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ.Implements(jsonMarshaler) || reflect.PointerTo(typ).Implements(jsonMarshaler) {
		return
	}
	if !holdsObjects(typ) {
		return
	}
	switch typ.Kind() {
	case reflect.Slice:
		walkValue(t, report, typ.Elem(), append(slices.Clone(steps), "[]"), s.child(t, "[]", pathText(steps)))
	case reflect.Map:
		walkValue(t, report, typ.Elem(), append(slices.Clone(steps), "{}"), s.child(t, "{}", pathText(steps)))
	case reflect.Struct:
		compareFields(t, report, typ, steps, s)
	}
}

// holdsObjects says whether a value of typ is, or holds, objects with
// fields of their own.
func holdsObjects(typ reflect.Type) bool {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
		typ = typ.Elem()
	}
	return typ.Kind() == reflect.Struct && !typ.Implements(jsonMarshaler) && !reflect.PointerTo(typ).Implements(jsonMarshaler)
}

// Every field the decoder accepts is in the schema, at the same place, and
// the schema names no field the decoder refuses.
func TestSchemaHasEveryField(t *testing.T) {
	b, err := os.ReadFile(compositionSchema)
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatalf("%s: %v", compositionSchema, err)
	}
	compileSchema(t, compositionSchema)
	compareFields(t, t.Errorf, reflect.TypeFor[dag.Composition](), nil, schemaNode{root: root, node: root})
}

// The walk above finds a field missing from the schema, or one the
// decoder does not have, and names it.
func TestSchemaFieldCheckFails(t *testing.T) {
	root := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name":      map[string]any{},
			"colour":    map[string]any{},
			"hosts":     map[string]any{"additionalProperties": map[string]any{"properties": map[string]any{}}},
			"formulas":  map[string]any{"items": map[string]any{"properties": map[string]any{}}},
			"retry":     map[string]any{"properties": map[string]any{}},
			"timeout":   map[string]any{},
			"vars":      map[string]any{},
			"operation": map[string]any{},
		},
	}
	var errs []string
	report := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	compareFields(t, report, reflect.TypeFor[dag.Composition](), nil, schemaNode{root: root, node: root})
	for _, want := range []string{
		`no property "on_failure" at (the top level): the decoder accepts it (dag.Composition.OnFailure)`,
		`no property "address" at hosts{}: the decoder accepts it (dag.Host.Address)`,
		`no property "nodes" at formulas[]`,
		`the property "colour" at (the top level), which the decoder refuses`,
	} {
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("no error %q in:\n%s", want, strings.Join(errs, "\n"))
		}
	}
}

// Every example composition names the schema in its yaml-language-server
// modeline, and the schema accepts it as the gantry CLI reads it.
func TestExamplesMatchSchema(t *testing.T) {
	s := compileSchema(t, compositionSchema)
	schemaAbs, err := filepath.Abs(compositionSchema)
	if err != nil {
		t.Fatal(err)
	}
	var checked int
	err = filepath.WalkDir("../../examples", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		root, err := composition.Parse(path, data)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		if root.Get("formulas") == nil {
			return nil // an inventory
		}
		checked++
		ref := modeline(data)
		if ref == "" {
			t.Errorf("%s: no `# yaml-language-server: $schema=...` line naming docs/composition.schema.json", path)
		} else if abs, _ := filepath.Abs(filepath.Join(filepath.Dir(path), ref)); abs != schemaAbs {
			t.Errorf("%s: the modeline's schema %s is not docs/composition.schema.json", path, ref)
		}
		doc, err := json.Marshal(root)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := schemaValidate(s, doc); err != nil {
			t.Errorf("%s: the schema refuses it: %v", path, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 4 {
		t.Errorf("checked %d examples; expected examples/*.yaml and examples/*/*.yaml", checked)
	}
}

// modeline is the schema a file names in its yaml-language-server modeline.
func modeline(data []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "# yaml-language-server: $schema="); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// structural are the problems of a document's shape, which a schema can
// tell: unknown fields, wrong types, missing fields.
var structural = []dag.Code{dag.CodeUnknownField, dag.CodeType, dag.CodeRequired}

// schemaAlsoRejects are cases of other codes that the schema rejects too:
// values outside an enumeration or a range, names that are not names,
// durations that are not durations.
var schemaAlsoRejects = []string{
	"bad operation", "bad on_failure", "bad transport", "bad condition",
	"bad duration", "duration of a unit alone", "negative timeout", "composition timeout bad duration",
	"composition timeout zero", "formula timeout bad duration", "formula timeout negative",
	"retry max_attempts zero", "retry multiplier below one", "node retry bad",
	"max_parallel zero", "max_parallel too large",
	"name with dot", "name with space", "name with star", "name with gt", "non-ASCII name",
	"upper-case host", "name too long", "leading dash", "bad workflow name", "bad env name", "gate env bad name",
}

// Every invalid composition of the corpus whose problems are all of its
// shape is rejected by the schema as by the decoder, and so are those of
// schemaAlsoRejects.
func TestSchemaRejectsStructuralProblems(t *testing.T) {
	s := compileSchema(t, compositionSchema)
	cases := validationCases()
	for _, name := range schemaAlsoRejects {
		if !slices.ContainsFunc(cases, func(c validationCase) bool { return c.name == name }) {
			t.Errorf("schemaAlsoRejects names %q, which is not a case of validationCases", name)
		}
	}
	var shape, other int
	for _, tc := range cases {
		isShape := !slices.ContainsFunc(tc.want, func(w want) bool { return !slices.Contains(structural, w.code) })
		if !isShape && !slices.Contains(schemaAlsoRejects, tc.name) {
			other++
			continue
		}
		shape++
		t.Run(tc.name, func(t *testing.T) {
			if _, err := load(t, tc.doc); err == nil {
				t.Errorf("the decoder accepts it")
			}
			if err := schemaValidate(s, []byte(tc.doc)); err == nil {
				t.Errorf("the schema accepts it; the decoder says %v", tc.want)
			}
		})
	}
	if shape < 10 {
		t.Errorf("only %d structural cases (%d others): is the corpus still validationCases?", shape, other)
	}
}

// The schema's conditions and enumerations accept what the decoder
// accepts: the other operations, a host without an address (transport
// local, or ssh reached at its name), a formula on a group.
func TestSchemaAcceptsValidVariants(t *testing.T) {
	s := compileSchema(t, compositionSchema)
	docs := map[string]string{
		"delete":     `{"name":"t","operation":"delete","hosts":{"h":{"transport":"local"}},"formulas":[{"id":"a","server":"h","nodes":[{"name":"n","delete":"rm x"}]}]}`,
		"check":      `{"name":"t","operation":"check","hosts":{"h":{"transport":"local"}},"formulas":[{"id":"a","server":"h","nodes":[{"name":"n","check":"true"}]}]}`,
		"group":      `{"name":"t","hosts":{"web.example.com":{"address":"10.0.0.1","labels":{"role":"web","zone":"eu-1"}}},"groups":{"web":{"labels":{"role":"web"}}},"formulas":[{"id":"a","group":"web","rollout":{"batch":"25%","max_failed":0},"nodes":[{"name":"n","run":"x","timeout":"0s","env":{"A":1,"B":{"secret":"b"}}}]}],"limits":[{"group":"web","max_parallel":2}],"priority":80,"timeout":"1h"}`,
		"dependency": `{"name":"t","hosts":{"h":{"transport":"local"}},"formulas":[{"id":"a","server":"h","nodes":[{"name":"n","run":"x"}],"health_gate":{"check":"true","timeout":"5s","retries":2}},{"id":"b","server":"h","depends_on":[{"formula":"a","condition":"healthy"}],"nodes":[{"name":"n","run":"x"}]},{"id":"c","server":"h","depends_on":["b"],"nodes":[{"name":"n","run":"x"}]}]}`,
		"become":     `{"name":"t","hosts":{"h":{"address":"h:22","user":"ops","become":true,"become_user":"app","identity_file":"~/.ssh/k"}},"formulas":[{"id":"a","server":"h","become":false,"nodes":[{"name":"n","run":"x","become":true}]}],"retry":{"max_attempts":3,"initial_interval":"1s","max_interval":"1m","multiplier":2}}`,
		"inventory":  `{"name":"t","inventory":"hosts.ini","formulas":[{"id":"a","server":"h","nodes":[{"name":"n","run":"x"}]}]}`,
		"no address": `{"name":"t","hosts":{"10.0.0.5":{"user":"deploy","become":true,"identity_file":"~/.ssh/fleet_ed25519"}},"formulas":[{"id":"a","server":"10.0.0.5","nodes":[{"name":"n","run":"x"}]}]}`,
		"extra vars": `{"name":"t","vars":{"a":"1"},"extra_vars":{"a":2,"b":true},"hosts":{"h":{"transport":"local","vars":{"x":"[1,2]"},"typed_vars":["x"],"max_parallel":4}},"targets":["n"],"reset":true,"on_failure":"rollback","formulas":[{"id":"a","server":"h","max_parallel":2,"timeout":"90s","nodes":[{"name":"n","run":"x","depends_on":[]}]}]}`,
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			root, err := dag.ParseJSON([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			check := dag.Load
			if name == "inventory" { // the CLI inlines it before Load
				check = dag.Decode
			}
			if _, err := check(root); err != nil {
				t.Fatalf("the decoder refuses it: %v", err)
			}
			if err := schemaValidate(s, []byte(doc)); err != nil {
				t.Errorf("the schema refuses it: %v", err)
			}
		})
	}
}
