package dag

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gantry-dev/gantry/pkg/template"
)

// renderer renders one composition's templates for expand: what each
// host's templates see, made once a host, and the problems rendering
// finds, once a path. pkg/template renders and bounds the cost.
type renderer struct {
	t *template.Renderer
	// failed holds the paths with a template problem reported: a group
	// formula's instances share their paths, and one problem a path is
	// enough.
	failed   map[string]bool
	reported bool                     // template.ErrBudget or ErrTooSlow was reported
	hosts    map[string]template.Data // each host's, made once
	shared   template.Vars            // the composition's vars, for hosts with none of their own
	// outputs renders the output reads of the formula being rendered.
	outputs *outputScope
}

func newRenderer(c *Composition) *renderer {
	sc := &outputScope{written: make(map[string]*Formula, len(c.Formulas))}
	for i := range c.Formulas {
		sc.written[c.Formulas[i].ID] = &c.Formulas[i]
	}
	return &renderer{t: template.New(sc), failed: map[string]bool{}, hosts: map[string]template.Data{}, outputs: sc}
}

// data is what the templates of host name see, made once a host. A host
// with vars of its own (or a composition with extra vars) gets a copy of
// the composition's with the others over them; the others share the
// composition's.
func (r *renderer) data(c *Composition, name string, h Host) (template.Data, error) {
	if d, ok := r.hosts[name]; ok {
		return d, nil
	}
	if r.shared == nil {
		r.shared = make(template.Vars, len(c.Vars))
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
		if err := r.t.SetTyped(&d, k, text); err != nil {
			return template.Data{}, err
		}
	}
	r.hosts[name] = d
	return d, nil
}

// templateData is what host name's templates see; shared holds the
// composition's vars, for a host with none of its own (read only).
func templateData(c *Composition, name string, h Host, shared template.Vars) template.Data {
	vars := shared
	if len(h.Vars) > 0 || len(c.ExtraVars) > 0 {
		vars = make(template.Vars, len(c.Vars)+len(h.Vars)+len(c.ExtraVars))
		for _, layer := range []map[string]string{c.Vars, h.Vars, c.ExtraVars} { // each over the one before
			for k, v := range layer {
				vars[k] = v
			}
		}
	}
	labels := h.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	addr := h.Address
	if h.Transport != TransportLocal {
		if a, err := hostAddress(h.Address); err == nil {
			addr = a
		}
	}
	return template.Data{Host: name, Address: addr, Labels: template.Map(labels), Vars: vars}
}

// maxProblemText bounds the text of a template problem (an error quoting
// a long var name would be as long).
const maxProblemText = 512

// report adds err, rendering the template at path of formula f, to ps:
// once a path (a group formula's instances share theirs), and the budget
// or the time spent once a composition.
func (r *renderer) report(ps *problems, path string, f *Formula, err error) {
	spent := errors.Is(err, template.ErrBudget) || errors.Is(err, template.ErrTooSlow)
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
