package dag

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Decode builds a Composition from a parsed document. It reports every
// unknown field, wrong type and bad duration at once; it does not check
// meaning (see Validate). Problems come back as an *InvalidError.
func Decode(root *Value) (*Composition, error) {
	var d decoder
	c := d.composition(root)
	return c, d.ps.err()
}

// Load decodes, validates, expands (fans group formulas out and renders
// command templates: see fleet.go) and normalizes a parsed document,
// reporting the problems of every pass together. On success the composition has every
// default filled in (see Normalize).
func Load(root *Value) (*Composition, error) {
	var d decoder
	c := d.composition(root)
	links := validate(c, &d.ps)
	if err := d.ps.err(); err != nil {
		return nil, err
	}
	linkOutputs(c, links)
	expand(c, &d.ps)
	if err := d.ps.err(); err != nil {
		return nil, err
	}
	Normalize(c)
	return c, nil
}

// ParseJSONComposition parses, validates and normalizes a JSON composition.
func ParseJSONComposition(data []byte) (*Composition, error) {
	root, err := ParseJSON(data)
	if err != nil {
		return nil, err
	}
	return Load(root)
}

type decoder struct {
	ps problems
}

// fields maps each known field of an object to its reader.
type fields map[string]func(v *Value, path string)

func (d *decoder) object(v *Value, path string, fs fields) bool {
	if !d.want(v, path, KindMap) {
		return false
	}
	for i, k := range v.Keys {
		kpath := keyPath(path, k)
		d.mark(kpath, v.Vals[i])
		f, ok := fs[k]
		if !ok {
			if hint := closest(k, fs); hint != "" {
				d.ps.add(kpath, v.Vals[i].Line, CodeUnknownField, "unknown field %q (did you mean %q?)", k, hint)
			} else {
				d.ps.add(kpath, v.Vals[i].Line, CodeUnknownField, "unknown field %q", k)
			}
			continue
		}
		if v.Vals[i].Kind == KindNull { // an explicit null is the same as leaving the field out
			continue
		}
		f(v.Vals[i], kpath)
	}
	return true
}

// mark remembers the source line of path for later problems.
func (d *decoder) mark(path string, v *Value) {
	if v.Line <= 0 {
		return
	}
	if d.ps.lines == nil {
		d.ps.lines = make(map[string]int)
	}
	d.ps.lines[path] = v.Line
}

func (d *decoder) want(v *Value, path string, k Kind) bool {
	if v.Kind != k {
		d.ps.add(path, v.Line, CodeType, "expected a %s, got %s", k, v.describe())
		return false
	}
	return true
}

func (d *decoder) str(dst *string) func(*Value, string) {
	return func(v *Value, path string) {
		if d.want(v, path, KindString) {
			*dst = v.Scalar
		}
	}
}

func (d *decoder) boolean(dst *bool) func(*Value, string) {
	return func(v *Value, path string) {
		if d.want(v, path, KindBool) {
			*dst = v.Scalar == "true"
		}
	}
}

// optBoolean reads a boolean that may be left out (nil).
func (d *decoder) optBoolean(dst **bool) func(*Value, string) {
	return func(v *Value, path string) {
		if d.want(v, path, KindBool) {
			b := v.Scalar == "true"
			*dst = &b
		}
	}
}

func (d *decoder) integer(dst *int) func(*Value, string) {
	return func(v *Value, path string) {
		if !d.want(v, path, KindNumber) {
			return
		}
		n, err := strconv.ParseInt(v.Scalar, 10, 32)
		if errors.Is(err, strconv.ErrRange) {
			d.ps.add(path, v.Line, CodeValue, "%s is out of range: a whole number from %d to %d", v.Scalar, math.MinInt32, math.MaxInt32)
			return
		}
		if err != nil {
			d.ps.add(path, v.Line, CodeType, "expected a whole number, got %s", v.Scalar)
			return
		}
		*dst = int(n)
	}
}

func (d *decoder) float(dst *float64) func(*Value, string) {
	return func(v *Value, path string) {
		if !d.want(v, path, KindNumber) {
			return
		}
		f, err := strconv.ParseFloat(v.Scalar, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			d.ps.add(path, v.Line, CodeType, "expected a number, got %s", v.Scalar)
			return
		}
		*dst = f
	}
}

// durationShape is a duration as time.ParseDuration reads it: when one of
// this shape does not parse, it is too long.
var durationShape = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

func (d *decoder) duration(dst *Duration) func(*Value, string) {
	return func(v *Value, path string) {
		if v.Kind != KindString {
			d.ps.add(path, v.Line, CodeType, "expected a duration string like \"90s\" or \"10m\", got %s", v.describe())
			return
		}
		t, err := time.ParseDuration(strings.TrimSpace(v.Scalar))
		if err != nil && durationShape.MatchString(strings.TrimSpace(v.Scalar)) {
			d.ps.add(path, v.Line, CodeValue, "duration %q is too long: at most %s", v.Scalar, time.Duration(math.MaxInt64).Truncate(time.Hour))
			return
		}
		if err != nil {
			d.ps.add(path, v.Line, CodeValue, "bad duration %q: use a number and a unit (ms, s, m, h), like \"90s\" or \"10m\"", v.Scalar)
			return
		}
		*dst = Duration(t)
	}
}

// bound reads a composition's or formula's timeout: a duration greater
// than 0 (left out, there is none).
func (d *decoder) bound(dst *Duration) func(*Value, string) {
	return func(v *Value, path string) {
		d.duration(dst)(v, path)
		if !d.ps.bad[path] && *dst <= 0 {
			d.ps.add(path, v.Line, CodeValue, "timeout must be greater than 0 (leave it out for none)")
		}
	}
}

func (d *decoder) strings(dst *[]string) func(*Value, string) {
	return func(v *Value, path string) {
		if !d.want(v, path, KindList) {
			return
		}
		out := make([]string, 0, len(v.Items))
		for i, it := range v.Items {
			d.mark(indexPath(path, i), it)
			if d.want(it, indexPath(path, i), KindString) {
				out = append(out, it.Scalar)
			}
		}
		*dst = out
	}
}

func (d *decoder) composition(v *Value) *Composition {
	c := &Composition{}
	var op, onf string
	d.object(v, "", fields{
		"name":       d.str(&c.Name),
		"operation":  d.str(&op),
		"hosts":      func(v *Value, p string) { c.Hosts = d.hosts(v, p) },
		"formulas":   func(v *Value, p string) { c.Formulas = d.formulas(v, p) },
		"retry":      func(v *Value, p string) { c.Retry = d.retry(v, p) },
		"on_failure": d.str(&onf),
		"targets":    d.strings(&c.Targets),
		"reset":      d.boolean(&c.Reset),
		"rerun":      d.strings(&c.Rerun),
		"vars":       d.scalars(&c.Vars),
		"extra_vars": d.scalars(&c.ExtraVars),
		"groups":     func(v *Value, p string) { c.Groups = d.groups(v, p) },
		"inventory":  d.str(&c.Inventory),
		"priority":   d.priority(&c.Priority),
		"limits":     func(v *Value, p string) { c.Limits = d.limits(v, p) },
		"timeout":    d.bound(&c.Timeout),
		"diff":       d.boolean(&c.Diff),
	})
	c.Operation, c.OnFailure = Operation(op), OnFailure(onf)
	return c
}

func (d *decoder) hosts(v *Value, path string) map[string]Host {
	if !d.want(v, path, KindMap) {
		return nil
	}
	out := make(map[string]Host, len(v.Keys))
	for i, name := range v.Keys {
		var h Host
		var tr string
		d.object(v.Vals[i], keyPath(path, name), fields{
			"address":       d.str(&h.Address),
			"user":          d.str(&h.User),
			"transport":     d.str(&tr),
			"via":           d.str(&h.Via),
			"labels":        d.scalars(&h.Labels),
			"vars":          d.scalars(&h.Vars),
			"typed_vars":    d.strings(&h.TypedVars),
			"max_parallel":  d.integer(&h.MaxParallel),
			"become":        d.boolean(&h.Become),
			"become_user":   d.str(&h.BecomeUser),
			"identity_file": d.str(&h.IdentityFile),
		})
		h.Transport = Transport(tr)
		if h.Address == "" && (h.Transport == "" || h.Transport == TransportSSH) {
			// As an inventory's host without ansible_host: the name is
			// where it is reached (10.0.0.5, web-1.example.com).
			h.Address = name
		}
		out[name] = h
	}
	return out
}

func (d *decoder) formulas(v *Value, path string) []Formula {
	if !d.want(v, path, KindList) {
		return nil
	}
	out := make([]Formula, len(v.Items))
	for i, it := range v.Items {
		f := &out[i]
		fp := indexPath(path, i)
		d.mark(fp, it)
		d.object(it, fp, fields{
			"id":      d.str(&f.ID),
			"server":  d.str(&f.Server),
			"group":   d.str(&f.Group),
			"rollout": func(v *Value, p string) { f.Rollout = d.rollout(v, p) },
			"max_parallel": func(v *Value, p string) {
				d.integer(&f.MaxParallel)(v, p)
				if f.MaxParallel <= 0 && v.Kind == KindNumber && !d.ps.bad[p] {
					d.ps.add(p, v.Line, CodeValue, "max_parallel must be at least 1 (1 runs nodes one at a time)")
				}
			},
			"depends_on":  func(v *Value, p string) { f.DependsOn = d.formulaDeps(v, p) },
			"nodes":       func(v *Value, p string) { f.Nodes = d.nodes(v, p) },
			"health_gate": func(v *Value, p string) { f.HealthGate = d.gate(v, p) },
			"timeout":     d.bound(&f.Timeout),
			"become":      d.optBoolean(&f.Become),
			"become_user": d.str(&f.BecomeUser),
		})
	}
	return out
}

func (d *decoder) formulaDeps(v *Value, path string) []FormulaDep {
	if !d.want(v, path, KindList) {
		return nil
	}
	out := make([]FormulaDep, len(v.Items))
	for i, it := range v.Items {
		dep := &out[i]
		var cond string
		ip := indexPath(path, i)
		d.mark(ip, it)
		if it.Kind == KindString { // shorthand: "- os-base" waits for completion
			dep.Formula = it.Scalar
			continue
		}
		if it.Kind != KindMap {
			d.ps.add(ip, it.Line, CodeType, "expected a formula id or a mapping {formula, condition}, got %s", it.describe())
			continue
		}
		d.object(it, ip, fields{
			"formula":   d.str(&dep.Formula),
			"condition": d.str(&cond),
		})
		dep.Condition = Condition(cond)
	}
	return out
}

func (d *decoder) nodes(v *Value, path string) []Node {
	if !d.want(v, path, KindList) {
		return nil
	}
	out := make([]Node, len(v.Items))
	for i, it := range v.Items {
		n := &out[i]
		d.mark(indexPath(path, i), it)
		d.object(it, indexPath(path, i), fields{
			"name":   d.str(&n.Name),
			"run":    d.str(&n.Run),
			"check":  d.str(&n.Check),
			"delete": d.str(&n.Delete),
			"depends_on": func(v *Value, p string) {
				n.dependsOnSet = true
				d.strings(&n.DependsOn)(v, p)
			},
			"timeout":     d.duration(&n.Timeout),
			"env":         func(v *Value, p string) { n.Env = d.env(v, p) },
			"retry":       func(v *Value, p string) { n.Retry = d.retry(v, p) },
			"become":      d.optBoolean(&n.Become),
			"become_user": d.str(&n.BecomeUser),
			"files":       func(v *Value, p string) { n.Files = d.files(v, p) },
			"outputs":     func(v *Value, p string) { n.Outputs = d.outputs(v, p) },
		})
	}
	return out
}

func (d *decoder) files(v *Value, path string) []File {
	if !d.want(v, path, KindList) {
		return nil
	}
	out := make([]File, len(v.Items))
	for i, it := range v.Items {
		f := &out[i]
		ip := indexPath(path, i)
		d.mark(ip, it)
		d.object(it, ip, fields{
			"path":     d.str(&f.Path),
			"content":  d.optStr(&f.Content),
			"template": d.optStr(&f.Template),
			"source":   d.str(&f.Source),
			"secret":   d.str(&f.Secret),
			"mode": func(v *Value, p string) {
				if v.Kind == KindNumber {
					d.ps.add(p, v.Line, CodeType, "mode must be a quoted octal string like \"0640\" (unquoted, %s is read as a number)", v.Scalar)
					return
				}
				d.str(&f.Mode)(v, p)
			},
			"owner": d.str(&f.Owner),
			"group": d.str(&f.Group),
			"mkdir": d.boolean(&f.Mkdir),
		})
	}
	return out
}

// optStr reads a string that may be left out (nil); an empty one is given.
func (d *decoder) optStr(dst **string) func(*Value, string) {
	return func(v *Value, path string) {
		if d.want(v, path, KindString) {
			s := v.Scalar
			*dst = &s
		}
	}
}

func (d *decoder) env(v *Value, path string) map[string]EnvValue {
	if !d.want(v, path, KindMap) {
		return nil
	}
	out := make(map[string]EnvValue, len(v.Keys))
	for i, k := range v.Keys {
		val, kpath := v.Vals[i], keyPath(path, k)
		d.mark(kpath, val)
		switch val.Kind {
		case KindString, KindNumber, KindBool: // PORT: 8080 is the text "8080"
			out[k] = Text(val.Scalar)
		case KindMap: // {secret: NAME}
			var name string
			if d.object(val, kpath, fields{"secret": d.str(&name)}) {
				if name == "" {
					d.ps.add(kpath+".secret", val.Line, CodeRequired, "expected {secret: NAME} with a secret name")
					continue
				}
				out[k] = SecretRef(name)
			}
		default:
			d.ps.add(kpath, val.Line, CodeType, "expected a string, number, boolean or {secret: NAME}, got %s", val.describe())
		}
	}
	return out
}

func (d *decoder) gate(v *Value, path string) *HealthGate {
	g := &HealthGate{}
	d.object(v, path, fields{
		"check":   d.str(&g.Check),
		"timeout": d.duration(&g.Timeout),
		"retries": d.integer(&g.Retries),
		"env":     func(v *Value, p string) { g.Env = d.env(v, p) },
	})
	return g
}

func (d *decoder) retry(v *Value, path string) *RetryPolicy {
	r := &RetryPolicy{}
	d.object(v, path, fields{
		"max_attempts":     d.integer(&r.MaxAttempts),
		"initial_interval": d.duration(&r.InitialInterval),
		"max_interval":     d.duration(&r.MaxInterval),
		"multiplier":       d.float(&r.Multiplier),
	})
	return r
}

// closest returns the known field nearest to name by edit distance, if it
// is near enough to be a likely typo.
func closest(name string, fs fields) string {
	best, bestD := "", 3
	for k := range fs {
		dist := editDistance(name, k)
		if dist < bestD || (dist == bestD && best != "" && k < best) {
			best, bestD = k, dist
		}
	}
	if bestD > 2 || best == "" {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	// Optimal string alignment: edits plus swaps of adjacent letters, so
	// "rnu" is one step from "run".
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
