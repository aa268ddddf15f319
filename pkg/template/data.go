package template

import "fmt"

// Data is what a command template sees: the host it runs on.
type Data struct {
	Host    string // the host's name in the composition
	Address string // its address (host:port), or "" for transport local
	Labels  Map    // its labels
	Vars    Vars   // the composition's vars, overridden by the host's (typed ones decoded), overridden by the extra vars
	typed   bool   // some of Vars are typed
}

// String is what printing the whole of it ({{ . }}) gives: its host, not
// every var.
func (d Data) String() string { return "<host " + d.Host + ">" }

// Map is the labels a template sees. Its entries are reached by name
// (.Labels.zone), index or range.
type Map map[string]string

// String is what printing the whole map ({{ .Labels }}) gives: how many
// entries it has, not the entries.
func (m Map) String() string { return fmt.Sprintf("<%d entries>", len(m)) }

// Vars is the vars a template sees: text, or typed values.
type Vars map[string]any

// String is what printing the whole map ({{ .Vars }}) gives: how many
// entries it has, not the entries.
func (m Vars) String() string { return fmt.Sprintf("<%d entries>", len(m)) }

// List is a typed list a template sees: {{ range .Vars.ntp }}.
type List []any

// Object is a typed mapping a template sees: {{ .Vars.cfg.port }}.
type Object map[string]any

// SetTyped puts the typed var name, decoded from its JSON text, in d's
// vars (which must be d's own: a copy, not vars shared with other
// hosts). Hosts whose var holds the same text (an inventory group's)
// share what it decodes to, read only.
func (r *Renderer) SetTyped(d *Data, name, text string) error {
	v, ok := r.decoded[text]
	if !ok {
		var err error
		if v, err = decodeTyped(text); err != nil {
			return fmt.Errorf("vars.%s is a typed var (typed_vars) but its value is %w", name, err)
		}
		r.decoded[text] = v
	}
	d.Vars[name], d.typed = v, true
	return nil
}
